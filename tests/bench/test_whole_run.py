"""bench/whole_run.py: the options and the side that the whole-run scripts of watching's cost share."""

from __future__ import annotations

import argparse
import json

import pytest

from .conftest import bench_script

whole_run = bench_script("whole_run")  # registered: the scripts beside it import it by this name


def test_a_length_is_prompt_plus_new_tokens_and_anything_else_names_the_form():
    assert whole_run.parse_length("128+32") == (128, 32)
    for bad in ("128", "128+x", "1+32", "128+32+1"):
        with pytest.raises(argparse.ArgumentTypeError, match="PROMPT"):
            whole_run.parse_length(bad)


def test_the_default_lengths_are_the_issues_two_and_rows_are_written_as_json(tmp_path):
    args = whole_run.whole_run_parser("x").parse_args(["--output", str(tmp_path / "rows.json")])
    assert args.lengths == [(128, 32), (16, 512)] and args.model == "smollm2"
    whole_run.write_rows(args.output, args.model, [{"ratio": 1.0}])
    assert json.loads((tmp_path / "rows.json").read_text()) == {"model": "smollm2", "rows": [{"ratio": 1.0}]}
    whole_run.write_rows(None, args.model, [])  # no file asked: nothing written, no error


def test_a_side_runs_plain_and_watched_to_the_same_tokens_and_only_the_watched_one_records(tiny_llama_dir):
    from kvlab.measure.timing import DecodeClock

    side = whole_run.Side(str(tiny_llama_dir), 8, warm_prompt=4)
    assert side.ids.shape == (1, 8)
    plain, no_watch = side.generate(False, 4)
    clock = DecodeClock()
    watched, watch = side.generate(True, 4, clock=clock)
    assert no_watch is None and watched == plain and len(plain) == 4
    assert len(clock.stamps) == 4  # the clock passed was the streamer: one stamp per new token
    assert {e["step"] for e in watch.trace.updates} == {0, 1, 2, 3}  # the prefill and three decode steps
