"""bench/watch_lockstep.py on a tiny saved model: two processes take turns token by token, and every pair gives a
ratio of the two sides' whole runs (never a timing assert: only that the figures are consistent)."""

from __future__ import annotations

import sys

import pytest

from .conftest import BENCH_SCRIPTS, bench_script


@pytest.fixture(scope="module")
def watch_lockstep():
    yield bench_script("watch_lockstep")  # registered: the spawned sides import it by this name
    sys.modules.pop("watch_lockstep", None)


def test_each_pair_runs_both_sides_to_the_same_tokens(watch_lockstep, tiny_llama_dir):
    row = watch_lockstep.lockstep(str(tiny_llama_dir), 8, 4, pairs=3)
    assert row["same_tokens"] is True and row["pairs"] == 3
    plain, watched = row["seconds"]["plain"], row["seconds"]["watched"]
    assert len(plain) == len(watched) == 3 and min(plain + watched) > 0
    assert row["sides"] == {"plain": {"watched": False, "kvlab": None}, "watched": {"watched": True, "kvlab": None}}
    ratios = sorted(w / p for p, w in zip(plain, watched))
    assert row["ratio"] == pytest.approx(ratios[1])  # the median of three pairs
    low, high = row["interval"]
    assert ratios[0] <= low <= row["ratio"] <= high <= ratios[-1]
    assert watch_lockstep.line(row).startswith("8 + 4 tokens, whole run in lockstep, watched / plain: ")
    assert list(row["breakdown"]) == ["setup", "prefill", "decode", "end"]
    assert all(part["first_ms"] > 0 for part in row["breakdown"].values())


def test_the_parts_of_a_run_are_its_slices_summed_setup_prefill_decode_end(watch_lockstep):
    plain = [[1e-3, 10e-3, 2e-3, 2e-3, 1e-3]] * 3  # setup, prefill, two decode steps, end
    watched = [[2e-3, 11e-3, 3e-3, 3e-3, 5e-3]] * 3
    parts = watch_lockstep.breakdown(plain, watched)
    assert {name: round(part["first_ms"], 6) for name, part in parts.items()} == {
        "setup": 1.0,
        "prefill": 10.0,
        "decode": 4.0,
        "end": 1.0,
    }
    assert {name: round(part["added_ms"], 6) for name, part in parts.items()} == {
        "setup": 1.0,
        "prefill": 1.0,
        "decode": 2.0,
        "end": 4.0,
    }


def test_against_an_earlier_checkout_both_sides_are_watched_and_each_imports_its_own_kvlab(
    watch_lockstep, tiny_llama_dir
):
    here = str(BENCH_SCRIPTS.parent)  # this checkout stands in for the earlier one
    sides = (("before", True, here), ("after", True, None))
    row = watch_lockstep.lockstep(str(tiny_llama_dir), 8, 4, pairs=3, sides=sides)
    assert row["same_tokens"] is True and set(row["seconds"]) == {"before", "after"}
    assert watch_lockstep.line(row).startswith("8 + 4 tokens, whole run in lockstep, after / before: ")


def test_against_a_directory_without_kvlab_is_refused_before_any_run(watch_lockstep, tmp_path, capsys):
    with pytest.raises(SystemExit):
        watch_lockstep.main(["--against", str(tmp_path)])
    assert "DIR/kvlab/__init__.py" in capsys.readouterr().err


def test_a_side_that_fails_stops_the_run_with_an_error_not_a_hang(watch_lockstep, tmp_path):
    with pytest.raises(RuntimeError, match="a lockstep side failed"):
        watch_lockstep.lockstep(str(tmp_path / "no-model-here"), 8, 4, pairs=3)


def test_too_few_pairs_are_refused_with_the_least_that_gives_an_interval(watch_lockstep):
    with pytest.raises(SystemExit):
        watch_lockstep.main(["--pairs", "2"])
