"""The explorer's kind descriptions (`kvlab.explorer.kinds`), and its "paged (generate_batch)" kind driven through
its callbacks without a browser (tiny models)."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from transformers import ContinuousBatchingConfig, GenerationConfig

import kvlab
from kvlab.cache_kinds import CACHE_KINDS, KIND_OPTIONS, PAGED, PAGED_DEFAULTS, PAGED_OPTIONS
from kvlab.explorer import Explorer, explore, kinds
from kvlab.explorer.controls import OPTION_NAMES, PROMPT_NAMES, Controls
from kvlab.explorer.kinds import PAGED_LABEL
from kvlab.measure.paged import paged_steps, paged_summary
from kvlab.recording.trace import Trace
from kvlab.serving.batch_run import TINY_LENGTHS, paged_requests

from .conftest import PROMPT

# 4 random requests (5, 19, 11 and 30 prompt tokens) x 12 new tokens in 16 blocks of 4: they do not all fit at
# once, so some wait and one is preempted (the same workload as tests/caches/test_paged.py)
PAGED_RUN = {"cache": PAGED, "page_size": 4, "requests": 4, "num_blocks": 16, "max_new_tokens": 12}


def make(model: str = "tiny-llama") -> Explorer:
    return explore(model_name=model, prompt_presets={"short": PROMPT})


def hidden(controls: Controls, names) -> set[str]:
    return {n for n in names if getattr(controls, n).layout.display == "none"}


def test_the_paged_kind_shows_only_its_options_and_hides_the_prompt():
    controls = Controls(prompt_presets={"p": "text"})
    assert (PAGED_LABEL, PAGED) in controls.cache.options  # shown as "paged (generate_batch)", value "paged"
    assert hidden(controls, PROMPT_NAMES) == set() and hidden(controls, PAGED_OPTIONS) == set(PAGED_OPTIONS)
    controls.set(cache=PAGED)
    assert set(OPTION_NAMES) - hidden(controls, OPTION_NAMES) == set(PAGED_OPTIONS)
    assert hidden(controls, PROMPT_NAMES) == set(PROMPT_NAMES)
    assert controls.request().options == PAGED_DEFAULTS
    controls.set(cache="static")  # back to a cache kind: its options and the prompt again, nothing of paged
    assert set(OPTION_NAMES) - hidden(controls, OPTION_NAMES) == set(KIND_OPTIONS["static"])
    assert hidden(controls, PROMPT_NAMES) == set() and controls.request().options == {"max_cache_len": 256}


def test_every_kind_is_described_once_and_a_trace_names_its_kind():
    assert [kind.name for kind in kinds.KINDS] == [*CACHE_KINDS, PAGED]
    generate_kinds = [kind for kind in kinds.KINDS if kind.name != PAGED]
    assert all(k.uses_prompt and k.streams and k.crops and k.figure is None for k in generate_kinds)
    paged = kinds.kind_of(PAGED)
    assert not (paged.uses_prompt or paged.streams or paged.crops) and paged.no_stop and paged.no_crop
    assert kinds.kind_of("encoder_decoder") is kinds.DEFAULT  # a loaded trace's kind the menu does not offer
    pool = {"cache_kind": PAGED, "paged": {"page_size": 4}}
    assert kinds.for_trace(Trace(meta=pool)) is paged
    assert kinds.for_trace(Trace(meta={"cache_kind": PAGED})) is kinds.DEFAULT  # no pool to read: the dashboard
    assert kinds.for_trace(Trace(meta={"cache_kind": "static"})).name == "static"


def test_a_paged_run_records_draws_and_tables_the_blocks():
    ex = make()
    run = ex.run_and_wait(**PAGED_RUN)
    assert ex.session.wait(30) and run.error is None, ex.message_text
    model, _ = ex.store.get("tiny-llama")
    assert model.config._attn_implementation != "paged|eager"  # restored after generate_batch

    # the trace is the paged cache's, the same as notebook 12's call under kvlab.watch with the same requests
    trace = run.result.trace
    assert trace.meta["cache_kind"] == "paged" and trace.meta["paged"]["page_size"] == 4 and trace.updates
    _, prompts = paged_requests(ex.store.get("tiny-llama")[1], 4, random_tokens=True)
    model.set_attn_implementation("paged|eager")
    try:
        with kvlab.watch(model) as watch:
            out = model.generate_batch(
                prompts,
                generation_config=GenerationConfig(max_new_tokens=12, do_sample=False, eos_token_id=-1),
                continuous_batching_config=ContinuousBatchingConfig(
                    page_size=4, num_blocks=16, max_batch_tokens=max(sum(map(len, prompts)), 64)
                ),
            )
    finally:
        model.set_attn_implementation("sdpa")
    assert run.result.generated_token_ids == [t for i in range(4) for t in out[f"req_{i}"].generated_tokens]
    assert paged_steps(trace) == paged_steps(watch.trace)
    summary = paged_summary(trace)
    assert summary["finished"] == 4 and summary["peak_blocks_in_use"] == 16 and summary["preemptions"] >= 1

    # the figure is the block timeline; the row carries the blocks, the fragmentation and the queueing
    assert ex.plot.value[:4] == b"\x89PNG"
    (row,) = ex.summary_rows()
    assert (row["prompt_tokens"], row["new_tokens"], row["steps"]) == (sum(TINY_LENGTHS[:4]), 48, summary["forwards"])
    assert (row["blocks_peak"], row["num_blocks"]) == (16, 16)
    assert (row["requests_waited"], row["preemptions"]) == (summary["requests_refused"], summary["preemptions"])
    assert row["waste_pct"] == summary["fragmentation_pct_mean"] > 0
    assert row["peak_bytes"] == trace.meta["paged"]["storage_bytes"] and row["slots_allocated"] == 0
    assert 'data-field="requests_waited"' in ex.table.value and "blocks peak" in ex.table.value
    assert ex.status.value.startswith("done: 4 requests, 48 new tokens") and not ex.run_button.disabled
    assert ex.text.value.count("req_") == 4

    # no cache to crop; the run can still be compared, saved and loaded again
    ex.on_crop()
    assert "went back to the pool" in ex.message_text and "kvlab-error" in ex.message.value
    table = list(csv.DictReader(io.StringIO(ex.on_save_table().data.decode())))
    assert table[0]["blocks_peak"] == "16" and table[0]["requests_waited"] == str(row["requests_waited"])
    saved = ex.on_save_trace()
    loaded = make().on_load_trace(saved.name, saved.data)
    assert paged_steps(loaded.trace) == paged_steps(trace) and loaded.request.cache == PAGED


def test_a_paged_run_beside_a_dynamic_one_in_the_comparison():
    ex = make()
    ex.run_and_wait(cache=PAGED, page_size=8, requests=2, max_new_tokens=4)  # num_blocks 0: room for both
    ex.on_add_to_comparison()
    ex.run_and_wait(cache="dynamic", max_new_tokens=4)
    paged_row, dynamic_row = ex.summary_rows()
    assert paged_row["fields_of"] == PAGED and (paged_row["requests_waited"], paged_row["preemptions"]) == (0, 0)
    assert "blocks_peak" not in dynamic_row and dynamic_row["new_tokens"] == 4
    assert ex.plot.value[:4] == b"\x89PNG" and ex.table.value.count('class="kvlab-row"') == 2
    ex.on_clear_comparison()  # without a paged row the table is the one every other kind has
    assert "blocks peak" not in ex.table.value


def test_models_with_sliding_layers_are_refused_in_one_line():
    ex = make("tiny-gemma3")
    ex.run_and_wait(cache=PAGED, max_new_tokens=4)  # the model loads in the run's thread: refused there
    assert ex.status.value == "failed" and "kvlab-traceback" not in ex.message.value
    message = ex.message_text
    assert "\n" not in message and "all full attention" in message and "tiny-gemma3 has sliding layers" in message
    ex.message.value = ""
    assert ex.run_and_wait(cache=PAGED) is None  # now loaded: refused before anything starts
    assert "tiny-gemma3 has sliding layers" in ex.message_text and ex.status.value.startswith("not started")


@pytest.mark.parametrize(
    ("controls", "message"),
    [
        ({"num_blocks": 2}, "num_blocks=2 is too small"),
        ({"num_blocks": -1}, "num_blocks must be 0"),
    ],
)
def test_bad_paged_options_are_one_line(controls, message):
    ex = make()
    ex.run_and_wait(**{**PAGED_RUN, **controls})
    assert message in ex.message_text and "kvlab-traceback" not in ex.message.value
    assert not ex.run_button.disabled


def test_stop_during_a_paged_run_explains_it_cannot(monkeypatch):
    import threading

    from kvlab.serving import batch_run

    release = threading.Event()
    started = threading.Event()
    real = batch_run.generate_paged

    def held(*args, **kwargs):
        started.set()
        release.wait(30)
        return real(*args, **kwargs)

    monkeypatch.setattr(batch_run, "generate_paged", held)
    ex = make()
    ex.controls.set(**PAGED_RUN)
    ex.on_run()
    try:
        assert started.wait(30)
        ex.on_stop()
        assert "cannot be stopped midway" in ex.message_text
    finally:
        release.set()
    assert ex.session.wait(30) and ex.status.value.startswith("done: 4 requests")


STRATEGY_FILE = Path(__file__).parent.parent / "strategies" / "keep_ends.py"


def test_a_strategy_defined_in_the_kernel_is_in_the_cache_menu_and_runs_as_kvlab_run(monkeypatch):
    from kvlab.strategies import load_strategy

    monkeypatch.setattr(kinds, "STRATEGIES", {})  # what this kernel offered so far: nothing
    keep_ends = load_strategy(f"{STRATEGY_FILE}:KeepEnds")  # as if a notebook cell had defined it
    ex = explore(model_name="tiny-llama", prompt_presets={"short": PROMPT}, strategies=[keep_ends])
    assert ("KeepEnds", "KeepEnds") in ex.controls.cache.options and ex.controls.cache.options[-1][1] == "KeepEnds"
    ex.controls.set(cache="KeepEnds")
    assert set(OPTION_NAMES) - hidden(ex.controls, OPTION_NAMES) == set()  # its options are its class defaults
    run = ex.run_and_wait(max_new_tokens=6)
    assert run.error is None and run.result.trace.meta["cache_kind"] == "KeepEnds"
    model, tokenizer = ex.store.get("tiny-llama")
    direct = kvlab.run(model, tokenizer, PROMPT, cache=keep_ends, max_new_tokens=6)
    assert run.result.generated_token_ids == direct.generated_token_ids
    assert run.result.trace.layer_table() == direct.trace.layer_table()
    assert kinds.for_trace(direct.trace) is kinds.STRATEGIES["KeepEnds"]
    (row,) = ex.summary_rows()
    assert row["tokens_evicted"] == direct.trace.summary()["tokens_evicted"] > 0


def test_a_strategy_offered_again_replaces_itself_and_a_bad_one_is_refused(monkeypatch):
    from kvlab.strategies import StrategyError

    monkeypatch.setattr(kinds, "STRATEGIES", {})
    kinds.offer_strategies([f"{STRATEGY_FILE}:KeepEnds", f"{STRATEGY_FILE}:KeepEnds"])
    assert list(kinds.STRATEGIES) == ["KeepEnds"] and kinds.kind_of("KeepEnds").options == ()
    with pytest.raises(StrategyError, match="NotALayer is not a transformers cache layer class"):
        kinds.offer_strategies([f"{STRATEGY_FILE}:NotALayer"])
    dynamic = type("dynamic", (kinds.STRATEGIES["KeepEnds"].layer_class,), {})
    with pytest.raises(StrategyError, match="a strategy cannot be named dynamic, a cache kind's name"):
        kinds.offer_strategies([dynamic])
