"""kvlab.size.beside_live: the meta method beside a watched tiny model, per layer kind (notebook 10, section 4)."""

import pytest
import torch
import transformers

import kvlab
from kvlab.models.tiny import tiny_model
from kvlab.size.beside_live import KindRow, beside_live, held_tokens, live_by_kind

PROMPT = torch.arange(3, 15).unsqueeze(0)  # (1, 12): ids under every tiny vocabulary's special tokens


class FakeTrace:
    """A trace's last update per layer, written by hand: what `live_by_kind` reads."""

    def __init__(self, events):
        self.events = events

    def final_layers(self):
        return self.events


def _event(kind, held, role="self"):
    return {"role": role, "layer_kind": kind, "bytes_held": held}


def test_the_live_side_sums_each_kind_and_counts_its_layers():
    trace = FakeTrace([_event("sliding", 10), _event("sliding", 10), _event("full", 30), _event("full", 7, "cross")])
    assert live_by_kind(trace) == {"sliding": (2, 20), "full": (1, 30), "cross": (1, 7)}


def test_a_sequence_of_n_tokens_leaves_n_minus_one_in_the_cache():
    assert held_tokens(16) == 15


def test_a_row_is_exact_only_when_both_sides_hold_the_same_bytes():
    assert KindRow("full", 2, 100, 100).exact
    assert not KindRow("full", 2, 100, 96).exact


def test_a_live_cache_that_held_other_bytes_is_not_exact_and_a_kind_only_one_side_has_shows_zero():
    config = tiny_model("llama").config
    live = beside_live(config, FakeTrace([_event("full", 1)] * 2), prompt_tokens=12, sequence_tokens=16)
    assert [(row.kind, row.layers, row.live_bytes, row.exact) for row in live] == [("full", 2, 2, False)]
    extra = beside_live(config, FakeTrace([_event("linear", 5)]), prompt_tokens=12, sequence_tokens=16)
    assert [(row.kind, row.live_bytes > 0, row.meta_bytes > 0) for row in extra] == [
        ("full", False, True),
        ("linear", True, False),
    ]


def _watched(model_type, new_tokens=4):
    """A tiny random model of `model_type`, watched while it generates `new_tokens` greedy tokens."""
    transformers.logging.set_verbosity_error()
    model = tiny_model(model_type, seed=0)
    with kvlab.watch(model) as watch:
        out = model.generate(
            PROMPT,
            attention_mask=torch.ones_like(PROMPT),
            do_sample=False,
            max_new_tokens=new_tokens,
            min_new_tokens=new_tokens,
        )  # (1, 12 + new_tokens)
    return model, watch.trace, out


@pytest.mark.parametrize(
    ("model_type", "kinds"),
    [
        ("llama", ["full"]),
        ("gemma3_text", ["sliding", "full"]),  # the sliding layers past their 8-token window
        ("deepseek_v3", ["full"]),  # MLA: the compressed latent and the rope key
        ("qwen3_next", ["linear", "full"]),  # a linear-attention state beside full layers
        ("mamba", ["linear"]),
    ],
)
def test_the_meta_method_equals_the_live_cache_of_a_tiny_model_per_kind(model_type, kinds):
    model, trace, out = _watched(model_type)
    assert out.shape[-1] == 16
    rows = beside_live(model.config, trace, prompt_tokens=12, sequence_tokens=out.shape[-1], dtype=model.dtype)
    assert [row.kind for row in rows] == kinds
    assert all(row.exact and row.meta_bytes > 0 for row in rows)
    assert sum(row.live_bytes for row in rows) == trace.summary()["final_bytes"]
    assert sum(row.layers for row in rows) == len(trace.final_layers())


def test_the_meta_bytes_are_counted_in_the_live_models_dtype():
    model, trace, out = _watched("llama", new_tokens=2)
    float32 = beside_live(model.config, trace, prompt_tokens=12, sequence_tokens=out.shape[-1], dtype=torch.float32)
    bf16 = beside_live(model.config, trace, prompt_tokens=12, sequence_tokens=out.shape[-1], dtype="bfloat16")
    assert float32[0].meta_bytes == 2 * bf16[0].meta_bytes and float32[0].exact and not bf16[0].exact
