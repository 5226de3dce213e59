"""`kvlab.run`: a request past the model's positions runs only when allowed, on every path a cache takes."""

import pytest

import kvlab
from kvlab.size.request_rules import RequestError


@pytest.mark.parametrize("kind", ["dynamic", "static", "none"])  # static without max_cache_len: kvlab.generate's
def test_past_the_positions_only_when_allowed(tiny, prompt_ids, kind):
    model = tiny("tiny-llama")  # 512 positions
    ids = prompt_ids(511)
    kvlab.run(model, None, ids, cache=kind, max_new_tokens=2)  # positions 0..511: the last new token is not fed
    with pytest.raises(RequestError, match="need 513 positions"):
        kvlab.run(model, None, ids, cache=kind, max_new_tokens=3)
    exactly = {"min_new_tokens": 3}  # random weights: no end-of-sequence token cuts it short
    result = kvlab.run(
        model, None, ids, cache=kind, max_new_tokens=3, allow_past_positions=True, generate_kwargs=exactly
    )
    assert result.prompt_tokens == 511 and len(result.generated_token_ids) == 3
    if kind == "static":
        assert result.options == {"max_cache_len": 513}  # generate sized it: prompt + new tokens - 1


def test_kvlab_generate_checks_the_length_generate_settles_on(tiny, prompt_ids):
    model = tiny("tiny-llama")
    ids = prompt_ids(500)
    with pytest.raises(RequestError, match=r"plus 14 new tokens need 513 positions"):
        kvlab.generate(model, ids, max_length=514, pad_token_id=0)  # max_length, not max_new_tokens
    with pytest.raises(RequestError, match="need 513 positions"):
        kvlab.generate(model, ids, max_new_tokens=14, use_cache=False, pad_token_id=0)  # no cache, same positions
    output, cache = kvlab.generate(
        model, ids, max_new_tokens=14, min_new_tokens=14, pad_token_id=0, allow_past_positions=True
    )
    assert output.shape[-1] == 514 and cache is not None


def test_the_static_size_kvlab_picks_is_one_it_accepts(prompt_ids):
    """Without max_cache_len, generate sizes the cache at prompt + new - 1; passing that size back is accepted
    and gives the same tokens, and one slot less is refused with the size to use."""
    from kvlab.caches.options import CacheOptionError

    # a model of its own: generate keeps reusing the largest static cache it built before on a model
    model, ids, exactly = kvlab.tiny_model("tiny-llama"), prompt_ids(20), {"min_new_tokens": 16}
    picked = kvlab.run(model, None, ids, cache="static", max_new_tokens=16, generate_kwargs=exactly)
    assert picked.options == {"max_cache_len": 35}
    again = kvlab.run(model, None, ids, cache="static", max_cache_len=35, max_new_tokens=16, generate_kwargs=exactly)
    assert again.generated_token_ids == picked.generated_token_ids
    with pytest.raises(CacheOptionError, match="use at least 35"):
        kvlab.run(model, None, ids, cache="static", max_cache_len=34, max_new_tokens=16)
