from __future__ import annotations

import pytest

import kvlab
from kvlab.caches import CacheCropError, CacheOptionError
from kvlab.explorer import models as explorer_models
from kvlab.explorer import summary
from kvlab.explorer.models import ByteTokenizer, ModelStore
from kvlab.explorer.session import RunRequest, Session

from .conftest import PROMPT


def request(**kwargs) -> RunRequest:
    return RunRequest(**{"model": "tiny-gemma3", "prompt": PROMPT, "max_new_tokens": 6, **kwargs})


def finished(session: Session, req: RunRequest):
    done, errors = [], []
    session.start(req, on_done=done.append, on_error=lambda run, msg: errors.append(msg))
    assert session.wait(60)
    assert errors == [] and done == [session.current]
    return session.current


def test_a_run_records_what_kvlab_run_records(tiny):
    session = Session()
    run = finished(session, request(cache="static", options={"max_cache_len": 48}))
    model, tokenizer = session.store.get("tiny-gemma3")
    direct = kvlab.run(model, tokenizer, PROMPT, cache="static", max_new_tokens=6, max_cache_len=48)
    assert run.result.generated_token_ids == direct.generated_token_ids
    assert run.result.trace.layer_table() == direct.trace.layer_table()
    assert run.prompt_tokens == direct.prompt_tokens and run.done


def test_cheap_errors_are_raised_before_any_thread_starts():
    session = Session()
    with pytest.raises(CacheOptionError, match="needs max_cache_len"):
        session.start(request(cache="static"))
    with pytest.raises(ValueError, match="max new tokens must be at least 1"):
        session.start(request(max_new_tokens=0))
    assert session.current is None and not session.running


def test_errors_found_after_loading_reach_on_error_as_one_line(monkeypatch):
    monkeypatch.setattr(explorer_models, "_SHARED", {})  # models load once per process: start from none loaded
    session, errors = Session(), []
    assert not session.store.is_ready("tiny-gemma3", "float32")  # so the layer kinds are only known in the thread
    session.start(request(cache="quantized", options={"backend": "quanto"}), on_error=lambda r, m: errors.append(m))
    session.wait(60)
    assert len(errors) == 1 and errors[0].startswith("a quantized cache needs every layer to be full attention")
    assert session.current.error == errors[0] and session.current.result is None


def test_with_the_model_loaded_every_check_runs_before_the_thread(tiny):
    session = Session(ModelStore(tiny("tiny-gemma3"), ByteTokenizer()))
    with pytest.raises(CacheOptionError, match="max_cache_len=4 is below the prompt length"):
        session.start(request(model="loaded", cache="static", options={"max_cache_len": 4}))
    assert session.current is None


def test_start_during_a_run_is_ignored_and_stop_keeps_the_partial_trace(gate):
    session = Session()
    on_token, release = gate(after=2)
    first = session.start(request(max_new_tokens=50), on_token=on_token)
    assert on_token.reached.wait(60)
    assert session.running and session.start(request()) is None and session.current is first
    assert session.stop()
    release()
    assert session.wait(60)
    result = first.result
    assert result.trace.meta["stopped"] and 2 <= len(result.generated_token_ids) < 50
    assert result.trace.summary()["steps"] == len(result.generated_token_ids)
    assert not session.stop()  # nothing runs any more


def test_comparison_keeps_finished_runs_once():
    session = Session()
    with pytest.raises(ValueError, match="no finished run"):
        session.add_to_comparison()
    first = finished(session, request())
    assert session.add_to_comparison() is first
    with pytest.raises(ValueError, match="already in the comparison"):
        session.add_to_comparison()
    finished(session, request(cache="static", options={"max_cache_len": 64}))
    session.add_to_comparison()
    assert [r.request.cache for r in session.comparison] == ["dynamic", "static"]
    session.clear_comparison()
    assert session.comparison == []


def test_crop_with_past_recording_shortens_every_layer():
    session = Session()
    finished(session, request(past_recording=True))
    event = session.crop(3)
    length = session.current.prompt_tokens + 5
    assert event["lengths_before"] == [length] * 6 and event["lengths_after"] == [length - 3] * 6
    rows = session.current.layer_rows()
    assert [r["slots_live"] for r in rows] == [7, 7, length - 3] * 2  # sliding layers back to window - 1


@pytest.mark.parametrize(
    ("req", "message"),
    [
        (request(past_recording=False), r"sliding layer 0 has seen \d+ tokens.*activate_past_recording\(\)"),
        (request(cache="static", options={"max_cache_len": 64}), r"StaticCache cannot record the past"),
        (request(cache="none"), r"used no cache \(cache kind 'none'\)"),
    ],
)
def test_crops_that_cannot_be_undone_are_refused_with_the_rule(req, message):
    session = Session()
    with pytest.raises(CacheCropError, match="no cache to crop yet"):
        session.crop(1)
    finished(session, req)
    with pytest.raises(CacheCropError, match="positive integer"):
        session.crop(0)
    with pytest.raises(CacheCropError, match=message):
        session.crop(2)


def test_a_dynamic_crop_keeps_its_storage_in_views_until_the_next_forward_frees_it():
    """What the table's note under "bytes now" says after a crop, measured: transformers slices a DynamicLayer's
    keys and values, so the bytes held stay; the next forward's torch.cat leaves the old storage behind."""
    import torch

    session = Session()
    run = finished(session, request(model="tiny-llama"))
    before = run.bytes_now()
    session.crop(4)
    crop = run.crop_bytes
    per_token = 3 * 2 * 2 * 16 * 4  # tiny-llama: 3 layers x (keys + values) x 2 KV heads x 16 dims x 4 bytes
    assert crop["before"] == crop["after"] == before and crop["kept_by_views"] == 4 * per_token
    assert "views that keep their old storage" in summary.crop_note(crop)
    cache, (model, _tokenizer) = run.result.cache_object, session.store.get("tiny-llama")
    length = cache.get_seq_length()
    with torch.inference_mode():  # one more token through the cropped cache: (1, 1) at position `length`
        model(torch.tensor([[5]]), past_key_values=cache, cache_position=torch.tensor([length]), use_cache=True)
    assert run.bytes_now() == before - crop["kept_by_views"] + per_token  # the slack freed, one token added


def test_a_static_crop_keeps_the_preallocated_tensors_and_says_so():
    session = Session()
    run = finished(session, request(model="tiny-llama", cache="static", options={"max_cache_len": 64}))
    session.crop(2)
    crop = run.crop_bytes
    assert crop["before"] == crop["after"] and crop["kept_by_views"] == 0
    assert "only moves its write position back" in summary.crop_note(crop)
    assert summary.crop_note(crop) in summary.to_html(summary.rows_for(session))
