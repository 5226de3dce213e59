"""bench/watch_lockstep.py on a tiny saved model: two processes take turns token by token, and every pair gives a
ratio of the two sides' whole runs (never a timing assert: only that the figures are consistent)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "bench" / "watch_lockstep.py"


@pytest.fixture(scope="module")
def watch_lockstep():
    spec = importlib.util.spec_from_file_location("watch_lockstep", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["watch_lockstep"] = module  # the spawned sides import it by this name
    spec.loader.exec_module(module)
    yield module
    sys.modules.pop("watch_lockstep", None)


def test_each_pair_runs_both_sides_to_the_same_tokens(watch_lockstep, tiny_llama_dir):
    row = watch_lockstep.lockstep(str(tiny_llama_dir), 8, 4, pairs=3)
    assert row["same_tokens"] is True and row["pairs"] == 3
    assert len(row["plain_s"]) == len(row["watched_s"]) == 3 and min(row["plain_s"] + row["watched_s"]) > 0
    ratios = sorted(w / p for p, w in zip(row["plain_s"], row["watched_s"]))
    assert row["ratio"] == pytest.approx(ratios[1])  # the median of three pairs
    low, high = row["interval"]
    assert ratios[0] <= low <= row["ratio"] <= high <= ratios[-1]
    assert watch_lockstep.line(row).startswith("8 + 4 tokens, whole run in lockstep, watched / plain: ")


def test_too_few_pairs_are_refused_with_the_least_that_gives_an_interval(watch_lockstep):
    with pytest.raises(SystemExit):
        watch_lockstep.main(["--pairs", "2"])
