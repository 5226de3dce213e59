"""`kvlab.size.request_rules`: what no cache option fixes (files to write, memory, positions), and every entry point
that generates refusing the same request with the same message before the first forward."""

from __future__ import annotations

import pytest

import kvlab
from kvlab.explorer.models import ByteTokenizer, ModelStore
from kvlab.explorer.session import RunRequest, Session
from kvlab.models.tiny import tiny_config
from kvlab.request import Request
from kvlab.size import cache_size, from_config
from kvlab.size import request_rules as rules

MiB = 1 << 20
# tiny-llama: 3 layers x K,V x 2 kv heads x 16 head_dim x 4 bytes = 768 B per token; 512 positions
TOKEN_BYTES = 3 * 2 * 2 * 16 * 4


def check(config=None, cache_kind="dynamic", options=None, *, max_new_tokens=0, **fields):
    """The request rules on a `Request` of these fields."""
    rules.check_request(Request(cache_kind, options or {}, config, new_tokens=max_new_tokens, **fields))


@pytest.fixture
def one_mib(monkeypatch):
    """The memory seam: every device has 1 MiB available; the devices asked about are recorded."""
    asked = []

    def available(device="cpu"):
        asked.append(str(device))
        return MiB

    monkeypatch.setattr(rules, "available_memory", available)
    return asked


def test_available_memory_is_what_the_machine_reports():
    import psutil

    free = rules.available_memory("cpu")
    assert isinstance(free, int) and 0 < free <= psutil.virtual_memory().total
    assert rules.available_memory("meta") is None  # a device kvlab cannot read: nothing is refused


def test_files_to_write_are_checked_first(tmp_path):
    rules.check_paths([None, tmp_path / "trace.json"])  # None: the option was not given
    with pytest.raises(rules.RequestError, match=r"cannot write .*missing.*does not exist; nothing was run"):
        check(paths=[tmp_path / "missing" / "trace.json"])
    with pytest.raises(rules.RequestError, match="it is a directory; name a file"):
        check(tiny_config("tiny-llama"), "dynamic", prompt_tokens=4, paths=[tmp_path])
    assert not list(tmp_path.iterdir())  # checking writes nothing


def test_a_static_cache_bigger_than_memory_is_refused_with_its_bytes(one_mib):
    config = tiny_config("tiny-llama")
    with pytest.raises(rules.RequestError) as err:
        check(config, "static", {"max_cache_len": 10_000}, prompt_tokens=6, max_new_tokens=3)
    assert str(err.value) == (
        f"a static cache of 10,000 slots per layer needs 7.32 MiB ({10_000 * TOKEN_BYTES:,} B) and CPU memory has "
        f"1.00 MiB ({MiB:,} B) available; valid here: max_cache_len at most {MiB // TOKEN_BYTES:,}"
    )
    check(config, "static", {"max_cache_len": MiB // TOKEN_BYTES}, prompt_tokens=6, max_new_tokens=3)
    with pytest.raises(rules.RequestError, match="1,366 slots per layer"):
        check(config, "static", {"max_cache_len": 1366}, prompt_tokens=6, max_new_tokens=3)
    # sized by generate (prompt + new - 1 slots): the new tokens that fit, capped by the model's 512 positions
    with pytest.raises(rules.RequestError, match=r"100,000,008 slots .* at most 507 new tokens \(the model's 512"):
        check(config, "static", {}, prompt_tokens=6, max_new_tokens=100_000_003)
    with pytest.raises(rules.RequestError, match=r"at most 1,360 new tokens$"):
        check(config, "static", {}, prompt_tokens=6, max_new_tokens=100_000_003, allow_past_positions=True)


def test_a_refusal_reads_the_models_architecture_once(one_mib, monkeypatch):
    """The bytes needed and the most that fits are sized on one `Architecture` (its layers are read once)."""
    read = []
    monkeypatch.setattr(rules, "from_config", lambda facts: read.append(facts) or from_config(facts))
    with pytest.raises(rules.RequestError, match="at most 1,360 new tokens"):
        check(
            tiny_config("tiny-llama"), "dynamic", {}, prompt_tokens=6, max_new_tokens=2_000, allow_past_positions=True
        )
    assert len(read) == 1


def test_every_kind_is_checked_at_the_most_it_would_hold_where_it_would_live(one_mib):
    config = tiny_config("tiny-llama")
    many = {"prompt_tokens": 6, "max_new_tokens": 2_000, "allow_past_positions": True}
    with pytest.raises(rules.RequestError, match=r"a dynamic cache of 2,005 tokens needs .*at most 1,360 new"):
        check(config, "dynamic", {}, **many)
    with pytest.raises(rules.RequestError, match="an offloaded cache of 2,005 tokens .* CPU memory has"):
        check(config, "offloaded", {}, device="cuda:0", **many)
    assert one_mib[-1] == "cpu"  # an offloaded cache lives in CPU memory whatever the model's device
    with pytest.raises(rules.RequestError, match="an offloaded_static cache"):
        check(config, "offloaded_static", {}, **many)
    with pytest.raises(rules.RequestError, match="x batch 4 needs"):
        check(config, "dynamic", {}, prompt_tokens=6, max_new_tokens=400, batch=4)
    with pytest.raises(rules.RequestError, match="cuda:0 memory has"):
        check(config, "static", {}, device="cuda:0", **many)
    with pytest.raises(rules.RequestError, match="not even the prompt's cache fits"):
        check(config, "dynamic", {}, prompt_tokens=2_000, max_new_tokens=1, allow_past_positions=True)
    with pytest.raises(rules.RequestError, match="a quantized cache"):
        check(config, "quantized", {"backend": "hqq"}, prompt_tokens=6, max_new_tokens=100_000)
    check(config, "none", {}, **many)  # no cache, nothing to hold
    check(config, "dynamic", {}, device=None, **many)  # spread over devices: not checked
    check(config, "dynamic", {}, dtype="int8", **many)  # a dtype the calculator cannot size
    check(config, "dynamic", {}, prompt_tokens=6, max_new_tokens=500)  # 505 x 768 B fits


def test_a_request_past_the_models_positions_is_refused_unless_allowed():
    config = tiny_config("tiny-llama")  # 512 positions (tests/test_model_facts.py reads them)
    check(config, "dynamic", prompt_tokens=500, max_new_tokens=13)  # positions 0..511
    with pytest.raises(rules.RequestError) as err:
        check(config, "dynamic", prompt_tokens=500, max_new_tokens=14)
    assert str(err.value) == (
        "the prompt (500 tokens) plus 14 new tokens need 513 positions (the last new token is not fed back), past "
        "this model's 512 (max_position_embeddings); valid: at most 13 new tokens with this prompt, or "
        "allow_past_positions=True (kvlab run --allow-past-positions) to generate past them anyway"
    )
    with pytest.raises(rules.RequestError, match="valid: a prompt of at most 512 tokens"):
        check(config, "none", prompt_tokens=600, max_new_tokens=3)
    check(config, "dynamic", prompt_tokens=600, max_new_tokens=3, allow_past_positions=True)
    check(tiny_config("tiny-mamba"), "dynamic", prompt_tokens=5_000, max_new_tokens=3)  # no limit
    bart = tiny_config("tiny-bart")  # 256 positions in the encoder and in the decoder
    with pytest.raises(rules.RequestError, match=r"the prompt \(300 tokens\) is longer than this model's encoder"):
        check(bart, "dynamic", prompt_tokens=300, max_new_tokens=3)
    with pytest.raises(rules.RequestError, match="257 new tokens need 257 decoder positions, past this model's 256"):
        check(bart, "dynamic", prompt_tokens=3, max_new_tokens=257)
    check(bart, "dynamic", prompt_tokens=256, max_new_tokens=256)


def request_message(config, **request) -> str:
    """What the rule module itself says about a request on tiny-llama."""
    with pytest.raises(rules.RequestError) as err:
        check(config, **request)
    return str(err.value)


REFUSED = [
    ("static", {"max_cache_len": 10_000}, 6, 3),  # bigger than the 1 MiB available
    ("dynamic", {}, 600, 3),  # past the 512 positions
]


@pytest.mark.parametrize("kind,given,prompt,new", REFUSED, ids=["memory", "positions"])
def test_every_entry_point_refuses_the_request_before_generating(tiny, prompt_ids, one_mib, kind, given, prompt, new):
    model = tiny("tiny-llama")
    ids = prompt_ids(prompt)
    message = request_message(model.config, cache_kind=kind, options=given, prompt_tokens=prompt, max_new_tokens=new)
    calls = {
        "kvlab.run": lambda: kvlab.run(model, None, ids, cache=kind, max_new_tokens=new, **given),
        "kvlab.generate": lambda: kvlab.generate(
            model, ids, cache_implementation=kind, max_new_tokens=new, pad_token_id=0, **given
        ),
    }
    forwards = []
    hook = model.register_forward_pre_hook(lambda *args: forwards.append(1))
    try:
        for entry, call in calls.items():
            with pytest.raises(rules.RequestError) as err:
                call()
            assert str(err.value) == message, entry
        session = Session(ModelStore(model, ByteTokenizer()))
        request = RunRequest(
            "loaded", cache=kind, options=dict(given), prompt="x", prompt_tokens=prompt, max_new_tokens=new
        )
        with pytest.raises(rules.RequestError) as err:
            session.start(request)
        assert str(err.value) == message and session.current is None
    finally:
        hook.remove()
    assert forwards == []  # refused before the first forward: nothing generated, no cache allocated


# -- the memory rule's bytes: the size calculator's, from the config alone
def test_the_prediction_is_the_size_calculators():
    arch = from_config(tiny_config("tiny-llama"))
    facts = {"prompt_tokens": 6, "cached_tokens": 8}
    assert rules.request_bytes(arch, "dynamic", {}, **facts) == cache_size(arch, "dynamic", 8, prefill=6).peak_bytes
    # a static cache at generate's size (cached tokens), or at its own max_cache_len
    assert rules.request_bytes(arch, "static", {}, **facts) == 3 * 2 * 2 * 16 * 4 * 8
    assert rules.request_bytes(arch, "static", {"max_cache_len": 100}, **facts, batch=2) == 2 * 3 * 2 * 2 * 16 * 4 * 100
    assert (
        rules.request_bytes(arch, "static", {"max_cache_len": 100}, **facts, dtype="bfloat16")
        == 3 * 2 * 2 * 16 * 2 * 100
    )
    gemma = from_config(tiny_config("tiny-gemma3"))  # sliding layers keep a window of 8
    expected = cache_size(gemma, "static", 50, prefill=6, max_cache_len=50).peak_bytes
    assert rules.request_bytes(gemma, "static", {}, prompt_tokens=6, cached_tokens=50) == expected
    bart = from_config(tiny_config("tiny-bart"))  # the encoder's 40 tokens fill the cross-attention cache
    expected = cache_size(bart, "dynamic", 5, prefill=1, source_tokens=40).peak_bytes
    assert rules.request_bytes(bart, "dynamic", {}, prompt_tokens=40, cached_tokens=5) == expected
    assert (
        rules.request_bytes(arch, "none", {}, **facts) is None
        and rules.request_bytes(arch, "dynamic", {}, **facts, dtype="x") is None
    )
    assert rules.requested_length("static", {"max_cache_len": 4}, 8) == 8  # generate's minimum


@pytest.mark.parametrize("kind,given", [("dynamic", {}), ("static", {}), ("static", {"max_cache_len": 9_000})])
def test_the_most_that_fits_is_the_boundary(kind, given):
    arch = from_config(tiny_config("tiny-llama"))
    facts = {"prompt_tokens": 6, "cached_tokens": 5_000}
    budget = 1 << 20
    n = rules.most_length(arch, kind, given, budget=budget, **facts)
    at = {"prompt_tokens": 6}
    length = {"max_cache_len": n} if kind == "static" else {}
    assert rules.request_bytes(arch, kind, {**given, **length}, cached_tokens=n, **at) <= budget
    bigger = {"max_cache_len": n + 1} if kind == "static" else {}
    assert rules.request_bytes(arch, kind, {**given, **bigger}, cached_tokens=n + 1, **at) > budget
    assert n == budget // (3 * 2 * 2 * 16 * 4)
    assert rules.most_length(arch, kind, given, budget=100, **facts) == 0  # not even the prompt fits
