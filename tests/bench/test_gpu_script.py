"""bench/gpu.py end to end on the CPU with `--tiny`: every section reports real numbers, or says why it has none.

The script runs in a child process: it sets SIGALRM for its section limits, which must not meet pytest's own."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SECTIONS = {"static_lengths", "compile", "offload", "quantized", "watch_overhead", "smollm2"}


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("gpu")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT)}
    command = [sys.executable, str(ROOT / "bench" / "gpu.py"), "--tiny", "--device", "cpu", "--out", str(out)]
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=150)
    assert done.returncode == 0, done.stderr[-3000:]
    return {"json": json.loads((out / "gpu.json").read_text()), "stdout": done.stdout}


def assert_ratio(comparison: dict) -> None:
    assert comparison["low"] <= comparison["ratio"] <= comparison["high"]
    assert comparison["a"]["median_s"] > 0 and comparison["b"]["median_s"] > 0
    assert comparison["verdict"]


def test_every_section_ran_without_error(tiny_run):
    sections = tiny_run["json"]["sections"]
    assert set(sections) == SECTIONS
    for name, section in sections.items():
        assert "error" not in section, (name, section.get("traceback"))
        assert 0 < section["section_seconds"] <= section["section_limit_s"] + 5
    assert tiny_run["json"]["meta"]["device"] == "cpu"


def test_static_lengths_compare_each_length_with_dynamic(tiny_run):
    rows = tiny_run["json"]["sections"]["static_lengths"]["rows"]
    assert list(rows) == ["dynamic", "static 64", "static 128", "static 256"]
    for label, row in rows.items():
        assert row["step"]["median_s"] > 0 and row["same_tokens_as_dynamic"]
        if label != "dynamic":
            assert_ratio(row["vs_dynamic"])


def test_compile_counts_a_compile_a_replay_and_a_recompile(tiny_run):
    section = tiny_run["json"]["sections"]["compile"]
    assert "no CUDA" in section["backend"]  # inductor only on the GPU; on the CPU graphs are counted
    assert [run["new_graphs"] > 0 for run in section["runs"]] == [True, False, True]
    assert section["steady_graphs"] == 0 and section["same_tokens"]
    assert_ratio(section["steady"])


def test_offload_counts_bytes_and_says_why_it_has_no_times_on_cpu(tiny_run):
    section = tiny_run["json"]["sections"]["offload"]
    assert "CUDA" in section["timing_skipped"]
    for label in ("offloaded", "offloaded_static"):
        row = section["rows"][label]
        assert row["traffic"]["bytes_per_decode_step"] > 0
        assert row["traffic"]["crossed_bytes"] == 0  # CPU to CPU: nothing crossed a bus
        assert "bandwidth_skipped" in row and "bytes_per_s_over_step" not in row


def test_quantized_rows_have_times_and_trace_bytes_or_a_reason(tiny_run):
    section = tiny_run["json"]["sections"]["quantized"]
    labels = set(section["rows"]) | set(section["skipped_configs"])
    assert labels == {"dynamic", "hqq int4", "quanto int4", "fp8"}
    assert "dynamic" in section["rows"] and "hqq int4" in section["rows"]
    for label, row in section["rows"].items():
        assert row["trace"]["peak_bytes"] > 0 and "device_memory_skipped" in row
        if label != "dynamic":
            assert_ratio(row["vs_dynamic"])
    assert all(section["skipped_configs"].values())


def test_watch_overhead_pairs_give_the_same_tokens(tiny_run):
    for section in (
        tiny_run["json"]["sections"]["watch_overhead"],
        tiny_run["json"]["sections"]["smollm2"]["watch_overhead"],
    ):
        assert section["same_tokens"]
        assert len(section["times"]["plain"]["times_s"]) == len(section["times"]["watched"]["times_s"]) >= 1
        assert_ratio(section["watched_vs_plain"])


def test_summary_printed(tiny_run):
    lines = tiny_run["stdout"].splitlines()
    assert lines[-1].startswith("wrote ")
    assert any(line.startswith("watch_overhead: ") and "plain" in line for line in lines)
