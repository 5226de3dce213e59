"""The explorer's callbacks, driven as a learner would drive the widgets, without a browser."""

from __future__ import annotations

import pytest

import kvlab
from kvlab.explorer import Explorer, explore

from .conftest import PROMPT

PRESETS = {"short": PROMPT}


def make(**kwargs) -> Explorer:
    return explore(model_name="tiny-gemma3", prompt_presets=PRESETS, **kwargs)


def slot_counts(row: dict) -> tuple[int, int, int]:
    return row["slots_allocated"], row["slots_live"], row["slots_masked"]


def test_choosing_a_cache_kind_shows_only_its_options():
    ex = make()
    ex.controls.cache.value = "quantized"
    assert ex.controls.max_cache_len.layout.display == "none" and ex.controls.nbits.layout.display is None
    ex.controls.cache.value = "offloaded_static"
    assert ex.controls.max_cache_len.layout.display is None and ex.controls.nbits.layout.display == "none"
    assert ex.controls.offload_only_non_sliding.layout.display is None


@pytest.mark.parametrize(("cache", "options"), [("static", {"max_cache_len": 80}), ("dynamic", {})])
def test_run_summary_matches_a_direct_kvlab_run(cache, options):
    ex = make()
    ex.run_and_wait(cache=cache, max_new_tokens=10, **options)
    (row,) = ex.summary_rows()
    model, tokenizer = ex.store.get("tiny-gemma3")
    direct = kvlab.run(model, tokenizer, PROMPT, cache=cache, max_new_tokens=10, **options).trace.summary()
    assert slot_counts(row) == (direct["slots_allocated"], direct["slots_live"], direct["slots_masked"])
    assert (row["peak_bytes"], row["tokens_evicted"]) == (direct["peak_bytes"], direct["tokens_evicted"])
    assert ex.plot.value[:4] == b"\x89PNG" and f'data-value="{direct["slots_allocated"]}"' in ex.table.value
    assert ex.status.value.startswith("done: 10 tokens") and not ex.run_button.disabled


@pytest.mark.real_model
def test_run_summary_matches_kvlab_run_on_smollm2(smollm2):
    ex = explore(*smollm2, prompt_presets=PRESETS)
    ex.run_and_wait(cache="static", max_cache_len=32, max_new_tokens=4)
    (row,) = ex.summary_rows()
    direct = kvlab.run(*smollm2, PROMPT, cache="static", max_cache_len=32, max_new_tokens=4).trace.summary()
    assert slot_counts(row) == (direct["slots_allocated"], direct["slots_live"], direct["slots_masked"])
    assert row["slots_allocated"] == 30 * 32


@pytest.mark.parametrize(
    ("controls", "message"),
    [
        ({"cache": "quantized", "backend": "quanto", "nbits": 3}, "quanto nbits must be one of 2, 4; got 3"),
        ({"cache": "static", "max_cache_len": 0}, "max_cache_len must be a positive integer"),
        ({"cache": "quantized", "backend": "hqq", "q_group_size": -1}, "q_group_size must be a positive integer"),
        ({"max_new_tokens": 0}, "at least 1"),
        ({"prompt": "   "}, "the prompt is empty"),
    ],
)
def test_invalid_options_show_a_message_and_start_nothing(controls, message):
    ex = make()
    ex.controls.max_new_tokens.min = 0
    assert ex.run_and_wait(**controls) is None
    assert message in ex.message.value and "kvlab-error" in ex.message.value
    assert ex.session.current is None and not ex.run_button.disabled and ex.status.value.startswith("not started")


def test_errors_found_in_the_run_thread_show_a_message_too():
    ex = make()
    ex.run_and_wait(cache="quantized")  # tiny-gemma3 has sliding layers: refused once the model is known
    assert "needs every layer to be full attention" in ex.message.value
    assert ex.status.value == "failed" and not ex.run_button.disabled


def test_run_during_a_run_is_ignored_and_stop_keeps_the_partial_trace(gate):
    ex = make()
    ex.controls.set(max_new_tokens=60)
    on_token, release = gate(after=3)
    wrapped = ex._on_token

    def held(run):
        wrapped(run)
        on_token(run)

    ex._on_token = held
    first = ex.on_run()
    assert on_token.reached.wait(60)
    assert ex.run_button.disabled and not ex.stop_button.disabled
    assert ex.on_run() is None and "already in progress" in ex.message.value and ex.session.current is first
    ex.on_stop()
    release()
    assert ex.session.wait(60)
    (row,) = ex.summary_rows()
    tokens = len(first.result.generated_token_ids)
    assert 3 <= tokens < 60 and row["new_tokens"] == tokens and row["steps"] == tokens and row["stopped"]
    assert ex.status.value.startswith(f"stopped after {tokens} tokens") and "partial trace is kept" in ex.message.value
    assert ex.plot.value[:4] == b"\x89PNG" and not ex.run_button.disabled


def test_crop_is_refused_with_the_rule_then_works_with_past_recording():
    ex = make()
    ex.on_crop()
    assert "no cache to crop yet" in ex.message.value
    ex.run_and_wait(max_new_tokens=4)
    ex.on_crop()
    assert "activate_past_recording()" in ex.message.value and "kvlab-error" in ex.message.value
    ex.run_and_wait(past_recording=True)
    before = ex.plot.value
    ex.crop_n.value = 2
    event = ex.on_crop()
    assert event["n"] == -2 and "cache.crop(-2)" in ex.message.value and ex.plot.value != before
    (row,) = ex.summary_rows()
    assert row["crops"] == 1 and row["slots_live"] == 4 * 7 + 2 * (event["lengths_after"][2])


def test_add_to_comparison_keeps_earlier_runs_as_rows():
    ex = make()
    ex.on_add_to_comparison()
    assert "no finished run" in ex.message.value
    ex.run_and_wait(cache="static", max_cache_len=64, max_new_tokens=3)
    ex.on_add_to_comparison()
    ex.run_and_wait(cache="dynamic")
    rows = ex.summary_rows()
    assert [r["run"] for r in rows] == ["[1]", "now"]
    assert rows[0]["slots_allocated"] == 4 * 8 + 2 * 64  # static sliding layers allocate their window only
    assert ex.table.value.count('class="kvlab-row"') == 2
    ex.on_clear_comparison()
    assert [r["run"] for r in ex.summary_rows()] == ["now"]


def test_explore_displays_as_its_widget():
    ex = make()
    bundle = ex._repr_mimebundle_()
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == ex.widget.model_id
