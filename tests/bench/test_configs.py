"""kvlab.bench.configs: what the default configurations do when built and run, and where each row's guide
columns come from (kvlab.measure.published.GUIDE), checked as relations rather than re-typed."""

import pytest
import torch

import kvlab
from kvlab.bench import GUIDE, default_configs
from kvlab.bench.runner import unsupported_reason
from kvlab.cache_kinds import STATIC_KINDS
from kvlab.measure.published import GUIDE as PUBLISHED_GUIDE

PROMPT, NEW = 8, 4


def test_every_default_configuration_is_accepted_and_its_cache_takes_a_prefill(prompt_ids):
    model = kvlab.tiny_model("tiny-llama")
    configs = default_configs(PROMPT, NEW, compile=True)
    assert len({c.label for c in configs}) == len(configs)  # a label names one row
    for config in configs:
        assert unsupported_reason(model, config, PROMPT, NEW) is None, config.label
        if config.cache_kind == "none":
            continue
        cache = kvlab.make_cache(config.cache_kind, model.config, **config.options)
        with torch.inference_mode():
            model(prompt_ids(PROMPT), cache=cache)
        assert cache.get_seq_length() == PROMPT and cache.trace.summary()["steps"] == 1, config.label


def test_static_kinds_have_room_for_the_whole_generation_and_only_one_row_compiles():
    configs = default_configs(PROMPT, NEW, compile=True)
    static = [c for c in configs if c.cache_kind in STATIC_KINDS]
    assert static and all(c.options["max_cache_len"] == PROMPT + NEW for c in static)
    assert [c.label for c in configs if c.compile] == ["static + torch.compile"]
    assert not any(c.compile for c in default_configs(PROMPT, NEW))  # without the flag, nothing compiles


def test_quantized_kinds_are_refused_on_a_model_with_sliding_layers():
    model = kvlab.tiny_model("tiny-gemma3")
    for config in default_configs(PROMPT, NEW):
        reason = unsupported_reason(model, config, PROMPT, NEW)
        assert (reason is not None) == (config.cache_kind == "quantized"), (config.label, reason)


@pytest.mark.parametrize("kind", list(PUBLISHED_GUIDE))
def test_the_guide_columns_are_the_guides_words_in_lower_case(kind):
    published = PUBLISHED_GUIDE[kind]
    assert GUIDE[kind] == {
        "sliding": published["sliding layers"].lower(),
        "offloading": published["offloading"].lower(),
        "compile": published["torch.compile"].lower(),
        "memory": published["memory"].lower(),
    }


def test_offloaded_kinds_extend_the_kind_they_offload_and_differ_only_in_memory():
    for offloaded, base in (("offloaded", "dynamic"), ("offloaded_static", "static")):
        differs = {column for column in GUIDE[base] if GUIDE[offloaded][column] != GUIDE[base][column]}
        assert differs == {"memory"} and "device" in GUIDE[offloaded]["memory"]
    assert set(GUIDE) == {c.cache_kind for c in default_configs(PROMPT, NEW, compile=True)}


def test_each_bench_row_carries_the_guide_columns_of_its_kind(tiny_bench):
    _, result = tiny_bench
    for row in result["rows"]:
        assert {k: row[f"guide_{k}"] for k in GUIDE[row["cache"]]} == GUIDE[row["cache"]], row["label"]
