"""Results leave the explorer (trace JSON, figure PNG, table CSV) and a saved trace comes back, through the same
callbacks the buttons and the file upload call; and an error shows its line, plus a folded traceback for a bug."""

from __future__ import annotations

import base64
import csv
import errno
import io
import json
import os
import re
import threading
from datetime import UTC, datetime
from types import SimpleNamespace

import pytest

import kvlab
from kvlab.explorer import explore, export
from kvlab.recording.trace import Trace

from .conftest import PROMPT

PRESETS = {"short": PROMPT}


def make(**kwargs):
    return explore(model_name="tiny-gemma3", prompt_presets=PRESETS, **kwargs)


def links(html_text: str) -> dict[str, bytes]:
    """{file name: bytes} of every download link, decoded from its data: URI as a browser would."""
    found = re.findall(r'download="([^"]+)" data-mime="[^"]+" href="data:[^;]+;base64,([^"]+)"', html_text)
    return {name: base64.b64decode(data) for name, data in found}


def upload(content: bytes, name: str = "trace.json") -> tuple[dict]:
    """A FileUpload value as ipywidgets 8 sets it when the browser sends a file."""
    return (
        {
            "name": name,
            "type": "application/json",
            "size": len(content),
            "content": memoryview(content),
            "last_modified": datetime(2025, 1, 1, tzinfo=UTC),
        },
    )


def test_save_buttons_offer_the_trace_the_figure_and_the_table_as_downloads(tmp_path):
    ex = make(save_dir=tmp_path)
    run = ex.run_and_wait(cache="static", max_cache_len=160, max_new_tokens=5)
    for button in (ex.save_trace_button, ex.save_figure_button, ex.save_table_button):
        button.click()  # the buttons' own handlers, as a browser click runs them
    files = links(ex.downloads.value)
    assert set(files) == {
        "kvlab_trace_tiny-gemma3_static.json",
        "kvlab_figure_tiny-gemma3_static.png",
        "kvlab_table_tiny-gemma3_static.csv",
    }
    for name, data in files.items():  # save_dir gets the same bytes, and the message says where
        assert (tmp_path / name).read_bytes() == data
    assert str(tmp_path / "kvlab_table_tiny-gemma3_static.csv") in ex.message_text

    saved = Trace.from_dict(json.loads(files["kvlab_trace_tiny-gemma3_static.json"]))
    assert saved.summary() == run.result.trace.summary() and saved.events == run.result.trace.events
    assert saved.meta["text"] == run.result.text and saved.meta["generated_token_ids"] == run.result.generated_token_ids
    assert saved.meta["cache_kind"] == "static" and saved.meta["options"] == {"max_cache_len": 160}

    png = files["kvlab_figure_tiny-gemma3_static.png"]
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > len(ex.plot.value)  # drawn again at 120 dpi

    (row,) = list(csv.DictReader(io.StringIO(files["kvlab_table_tiny-gemma3_static.csv"].decode())))
    (shown,) = ex.summary_rows()
    assert row["label"] == "tiny-gemma3 · static (max_cache_len=160)"
    assert {k: int(row[k]) for k in ("slots_allocated", "slots_live", "slots_masked", "peak_bytes")} == {
        k: shown[k] for k in ("slots_allocated", "slots_live", "slots_masked", "peak_bytes")
    }

    ex.save_trace_button.click()  # saving again replaces the link of the same name, it does not add one
    assert ex.downloads.value.count("kvlab_trace_tiny-gemma3_static.json") == 2  # download= and the link text


def test_a_save_dir_that_cannot_be_written_is_one_line_and_the_download_still_works(tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("not a directory")
    ex = make(save_dir=blocked / "sub")
    ex.run_and_wait(max_new_tokens=2)
    ex.save_table_button.click()
    assert f"could not be written to {blocked / 'sub'}" in ex.message_text and "<details" not in ex.message.value
    assert list(links(ex.downloads.value)) == ["kvlab_table_tiny-gemma3_dynamic.csv"]


def test_a_save_onto_a_full_disk_keeps_the_earlier_file_and_names_it(tmp_path, monkeypatch):
    ex = make(save_dir=tmp_path)
    ex.run_and_wait(max_new_tokens=2)
    ex.save_trace_button.click()
    saved = tmp_path / "kvlab_trace_tiny-gemma3_dynamic.json"
    earlier = saved.read_bytes()
    ex.run_and_wait(max_new_tokens=4)  # a longer run, saved under the same name onto a disk that is now full

    def no_space(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", no_space)
    ex.save_trace_button.click()
    monkeypatch.undo()
    assert f"cannot write {saved}: No space left on device; the file that was there is unchanged" in ex.message_text
    assert "\n" not in ex.message_text and "<details" not in ex.message.value  # one line, no traceback
    assert saved.read_bytes() == earlier and [p.name for p in tmp_path.iterdir()] == [saved.name]  # no .tmp left
    assert len(Trace.load(saved).meta["generated_token_ids"]) == 2  # the earlier save, still loadable
    offered = links(ex.downloads.value)[saved.name]  # the download still holds the new run
    assert len(json.loads(offered)["meta"]["generated_token_ids"]) == 4


def test_saving_before_a_run_is_one_line():
    ex = make()
    ex.save_figure_button.click()
    assert "nothing to save yet" in ex.message_text and "kvlab-error" in ex.message.value
    assert "<details" not in ex.message.value and ex.downloads.value == ""


def test_a_saved_trace_loads_back_drawn_tabled_and_comparable(monkeypatch):
    from kvlab.explorer import models

    first = make()
    first.run_and_wait(cache="static", max_cache_len=160, max_new_tokens=5)
    saved = first.on_save_trace()

    monkeypatch.setattr(models, "_SHARED", {})  # as in a new kernel: no model loaded
    ex = make()
    ex.load_button.value = upload(saved.data, saved.name)  # what the FileUpload receives from the browser
    assert ex.load_button.value == ()  # cleared, so the same file can be loaded again
    (row,) = ex.summary_rows()
    (original,) = first.summary_rows()
    numbers = (
        "prompt_tokens new_tokens steps peak_bytes bytes_now slots_allocated slots_live slots_masked waste_pct "
        "tokens_evicted"
    ).split()
    assert {k: row[k] for k in numbers} == {k: original[k] for k in numbers}
    assert row["label"].endswith(f"[loaded from {saved.name}]")
    assert ex.plot.value[:4] == b"\x89PNG" and 'data-value="352"' in ex.table.value
    assert f"Loaded {saved.name}" in ex.message_text and saved.name in ex.status.value
    assert first.session.current.result.text in ex.text.value  # the text saved with the trace
    assert not ex.store.is_ready("tiny-gemma3", "float32")  # loading a trace loads no model

    assert ex.on_crop() is None and "a saved trace has no cache to crop" in ex.message_text
    ex.on_add_to_comparison()
    ex.run_and_wait(cache="dynamic", max_new_tokens=3)
    assert [r["run"] for r in ex.summary_rows()] == ["[1]", "now"]
    assert ex.on_save_trace().name == "kvlab_trace_tiny-gemma3_dynamic.json"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\xff\xfe\x00", "bad.json is not text (not UTF-8)"),
        (b"{not json", "bad.json does not parse as JSON (Expecting property name enclosed in double quotes at line 1)"),
        (b'{"events": []}', "bad.json is not a kvlab trace: expected a JSON object with a 'kvlab_trace' key."),
        (b'{"kvlab_trace": 1, "events": [{"type": "crop", "step": 0}]}', "bad.json: event 0 (crop) lacks role, n"),
    ],
)
def test_a_file_that_is_not_a_trace_is_refused_in_one_line(content, message):
    ex = make()
    ex.load_button.value = upload(content, "bad.json")
    assert message in ex.message_text and "\n" not in ex.message_text.strip()
    assert "kvlab-error" in ex.message.value and "<details" not in ex.message.value
    assert ex.session.current is None and ex.load_button.value == ()


def test_a_trace_from_kvlab_run_loads_into_the_explorer(tmp_path, monkeypatch, capsys):
    """`kvlab run --trace FILE` (the command's own code, in-process) on a tiny model, then Load trace."""
    from kvlab import models
    from kvlab.cli import main
    from kvlab.explorer.models import ByteTokenizer

    model = kvlab.tiny_model("tiny-llama")
    monkeypatch.setattr(models, "load_config_and_tokenizer", lambda name: (model.config, ByteTokenizer()))
    monkeypatch.setattr(models, "load", lambda name, dtype="float32", **kwargs: (model, ByteTokenizer()))
    path = tmp_path / "run.json"
    args = "run --model tiny-llama --cache static --max-cache-len 32 --prompt abcdefgh --max-new-tokens 4 --trace"
    assert main([*args.split(), str(path)]) == 0
    capsys.readouterr()
    ex = make()
    run = ex.on_load_trace(path.name, path.read_bytes())
    (row,) = ex.summary_rows()
    s = Trace.load(path).summary()
    assert (row["slots_allocated"], row["slots_live"], row["slots_masked"]) == (3 * 32, 3 * 11, 3 * 21)
    assert (row["peak_bytes"], row["steps"]) == (s["peak_bytes"], s["steps"]) and run.request.cache == "static"
    assert (row["new_tokens"], row["prompt_tokens"]) == (4, 8) and "not saved in run.json" in ex.text.value


@pytest.mark.real_model
def test_kvlab_run_trace_file_loads_into_the_explorer(tmp_path, capsys):
    from kvlab.cli import main

    path = tmp_path / "cli.json"
    args = "run --model smollm2 --cache static --max-cache-len 64 --max-new-tokens 4 --trace".split()
    assert main([*args, str(path), "--prompt", "The cache holds"]) == 0  # in smollm2's chat template: 33 tokens
    capsys.readouterr()
    ex = make()
    ex.on_load_trace(path.name, path.read_bytes())
    (row,) = ex.summary_rows()
    assert row["slots_allocated"] == 30 * 64 and row["label"].startswith("smollm2 · static (max_cache_len=64)")
    assert row["slots_live"] == 30 * (row["prompt_tokens"] + 4 - 1) and row["new_tokens"] == 4


def test_a_bug_in_the_run_shows_its_line_and_a_folded_traceback(monkeypatch):
    from kvlab.explorer import generation

    def broken(*args, **kwargs):
        raise RuntimeError("boom: a bug on purpose")

    monkeypatch.setattr(generation, "generate_traced", broken)
    ex = make()
    ex.run_and_wait(max_new_tokens=2)
    assert ex.message_text.startswith("RuntimeError: boom: a bug on purpose")
    folded = re.search(r'<details class="kvlab-traceback">.*</details>', ex.message.value, re.S).group(0)
    assert "Traceback (most recent call last)" in folded and "in broken" in folded and "<details open" not in folded
    assert ex.status.value == "failed" and not ex.run_button.disabled


def test_a_run_that_fails_at_once_is_reported_after_the_running_state_not_under_it(monkeypatch):
    """The run thread may report before `on_run` returns: here it runs inside `start`, the worst case."""
    from kvlab.explorer import generation, session

    class AtOnce:
        def __init__(self, target, args, **kwargs):
            self.target, self.args = target, args

        def start(self):
            self.target(*self.args)

        def is_alive(self):
            return False

        def join(self, timeout=None):
            pass

    def broken(*args, **kwargs):
        raise RuntimeError("boom at once")

    monkeypatch.setattr(generation, "generate_traced", broken)
    monkeypatch.setattr(session, "threading", SimpleNamespace(Thread=AtOnce, Event=threading.Event))
    ex = make()
    assert ex.on_run() is not None
    assert ex.status.value == "failed" and ex.message_text.startswith("RuntimeError: boom at once")
    assert not ex.run_button.disabled and ex.stop_button.disabled and not ex.save_trace_button.disabled


def test_a_bug_in_a_button_callback_is_shown_not_lost_and_user_errors_stay_one_line(monkeypatch):
    ex = make()
    ex.compare_button.click()  # a user's mistake: one line
    assert "no finished run" in ex.message_text and "<details" not in ex.message.value

    def broken():
        raise KeyError("oops")

    monkeypatch.setattr(ex.session, "clear_comparison", broken)
    ex.clear_button.click()
    assert ex.message_text.startswith("KeyError: 'oops'") and 'class="kvlab-traceback"' in ex.message.value


def test_export_helpers():
    assert export.slug("smollm2 · static (max_cache_len=64)") == "smollm2_static_max_cache_len64"
    item = export.Export("a.csv", b"x,y\n1,2\n", "text/csv")
    assert 'href="data:text/csv;base64,eCx5CjEsMgo="' in item.link() and "(8 B)" in item.link()
    assert (
        export.table_csv([]) == b"run,prompt_tokens,new_tokens,steps,peak_bytes,bytes_now,slots_allocated,"
        b"slots_live,slots_masked,waste_pct,tokens_evicted,flushes,transfers,crops,ms_per_step,tokens_per_s,label,stopped\n"
    )
