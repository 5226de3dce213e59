import torch

import kvlab


def test_by_name_matches_transformers_cache_implementation(tiny, prompt_ids):
    # a fresh model: generate never builds a static cache smaller than one it built before on the same model,
    # so the shared session model's size would depend on the tests that ran first
    model = kvlab.tiny_model("tiny-gemma3")
    ids = prompt_ids(12)
    kwargs = dict(max_new_tokens=6, do_sample=False, pad_token_id=0)
    for name, config in (
        ("static", None),
        ("dynamic", None),
        ("quantized", {"backend": "quanto", "nbits": 2, "q_group_size": 16}),
    ):
        target = tiny("tiny-llama") if name == "quantized" else model
        ours, cache = kvlab.generate(target, ids, cache_implementation=name, cache_config=config, **kwargs)
        theirs = target.generate(ids, cache_implementation=name, cache_config=config, **kwargs)
        assert torch.equal(ours, theirs)
        assert cache.trace.summary()["steps"] == 6
    _, static = kvlab.generate(model, ids, cache_implementation="static", **kwargs)
    assert (
        static.layers[2].max_cache_len == 12 + 6 - 1
    )  # sized like transformers: max_length - 1 (the last token is never cached)


def test_run_reports_only_new_tokens_for_encoder_decoder_models(tiny, prompt_ids):
    model = tiny("tiny-bart")
    result = kvlab.run(
        model, None, prompt_ids(10), cache="dynamic", max_new_tokens=5, generate_kwargs={"min_new_tokens": 5}
    )
    assert len(result.generated_token_ids) == 5
    assert result.trace.layer_table()[0]["logical_length"] == 5  # decoder start + 4 fed-back tokens
