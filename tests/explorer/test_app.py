"""The explorer's callbacks, driven as a learner would drive the widgets, without a browser."""

from __future__ import annotations

import html
import io
import threading
import time

import matplotlib.image
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
def test_run_summary_matches_kvlab_run_on_smollm2_in_its_chat_template(smollm2):
    ex = explore(*smollm2, prompt_presets=PRESETS)
    assert ex.controls.chat.value and not ex.controls.chat.disabled  # an instruct model: its template by default
    ex.run_and_wait(cache="static", max_cache_len=64, max_new_tokens=4)
    (row,) = ex.summary_rows()
    direct = kvlab.run(*smollm2, PROMPT, cache="static", max_cache_len=64, max_new_tokens=4, chat=True)
    assert slot_counts(row) == tuple(
        direct.trace.summary()[f] for f in ("slots_allocated", "slots_live", "slots_masked")
    )
    assert row["slots_allocated"] == 30 * 64 and row["prompt_tokens"] == direct.prompt_tokens
    assert ex.text.value.endswith(html.escape(direct.text) + "</pre>")  # the same greedy answer, to the chat turn


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


WIDGETS_FIRST = """
import json, sys, threading, types
from kvlab.explorer import app

held = []  # the warm-up thread, made but not started: what the page shows before it runs


class Held:
    def __init__(self, target, args, daemon, name):
        held.append(name)

    def start(self):
        pass


app.threading = types.SimpleNamespace(Thread=Held, Lock=threading.Lock, Event=threading.Event)
ex = app.explore(model_name="smollm2", preload=True)
bundle = ex._repr_mimebundle_()
heavy = sorted({"torch", "transformers", "matplotlib"} & set(sys.modules))
print(json.dumps({"heavy": heavy, "held": held, "chat": ex.controls.chat.value, "png": ex.plot.value[:8].hex(),
                  "shown": "application/vnd.jupyter.widget-view+json" in bundle}))
"""


def test_the_widgets_are_drawn_before_torch_transformers_or_matplotlib_is_imported():
    """The first frame waits for none of them (seconds): the warm-up thread imports them once the page is up."""
    import json
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", WIDGETS_FIRST], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["heavy"] == [] and seen["held"] == ["kvlab-explorer-warm-up"] and seen["shown"]
    assert seen["chat"]  # smollm2 is an instruct model: its chat template is ticked before its tokenizer loads
    assert seen["png"] == "89504e470d0a1a0a"  # a real (blank) PNG, not the browser's broken-image icon


def warmed(**kwargs) -> Explorer:
    """An explorer whose warm-up thread (imports, the empty picture, the model with `preload`) has finished."""
    ex = explore(**{"model_name": "tiny-gemma3", "prompt_presets": PRESETS, **kwargs})
    for thread in threading.enumerate():
        if thread.name == "kvlab-explorer-warm-up":
            thread.join(60)
    return ex


def test_the_warm_up_draws_the_empty_picture_then_loads_the_model():
    from kvlab.explorer.app import BLANK_PNG

    assert matplotlib.image.imread(io.BytesIO(BLANK_PNG)).shape == (1, 1, 4)  # what shows until then
    ex = warmed(preload=True)
    assert ex.plot.value[:4] == b"\x89PNG" and len(ex.plot.value) > 10 * len(BLANK_PNG)  # "press Run", drawn
    assert ex.store.is_ready("tiny-gemma3", "float32")
    assert ex.status.value == "tiny-gemma3 is loaded: choose a cache and press Run."


def test_the_first_picture_comes_from_the_prefill_before_the_first_token(gate):
    ex = warmed()
    empty = ex.plot.value
    on_token, release = gate(after=1)
    wrapped = ex._on_token

    def held(run):  # the first token waits here, before the explorer hears of it, until the picture is checked
        on_token(run)
        wrapped(run)

    ex._on_token = held
    ex.on_run()
    assert on_token.reached.wait(60)
    for _ in range(600):  # the drawing thread draws from the prefill's cache updates alone
        if ex.plot.value != empty:
            break
        time.sleep(0.05)
    assert ex.plot.value != empty and ex.progress.value == 0  # drawn, and no token reported yet
    release()
    assert ex.session.wait(60)


def test_a_quanto_cache_says_its_extension_builds_while_it_builds(monkeypatch):
    """optimum-quanto builds a C++ extension on first use (about a minute): kvlab.run builds it before its clock
    starts, and the explorer's status line says so meanwhile instead of "prefill…"."""
    from kvlab import recorded_run
    from kvlab.caches import quantized

    ex = warmed(model_name="tiny-llama", preload=True)
    seen = []
    monkeypatch.setattr(quantized, "quanto_extension_pending", lambda device: True)
    monkeypatch.setattr(recorded_run, "ensure_quanto_extension", lambda device: seen.append(ex.status.value))
    ex.run_and_wait(cache="quantized", backend="quanto", nbits=4, q_group_size=16, max_new_tokens=2)
    assert seen == ["building optimum-quanto&#x27;s C++ extension once (about 1 minute)…"]
    assert ex.status.value.startswith("done: 2 tokens")
