"""bench/watch_instructions.py: its pieces on real inputs (valgrind's own output, a real model's two sides); the
whole count under valgrind takes minutes a side, so it runs by hand, not here."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import bench_script

watch_instructions = bench_script("watch_instructions")


def _cachegrind(tmp_path: Path, name: str, code: str) -> Path:
    out = tmp_path / f"{name}.cachegrind"
    command = ["valgrind", "--tool=cachegrind", "--cache-sim=no", f"--cachegrind-out-file={out}"]
    env = {**os.environ, **watch_instructions.CHILD_ENV}
    subprocess.run([*command, sys.executable, "-S", "-c", code], check=True, capture_output=True, env=env)
    return out


@pytest.mark.skipif(shutil.which("valgrind") is None, reason="valgrind is not installed")
def test_the_count_is_cachegrinds_total_and_grows_with_the_work(tmp_path):
    idle = watch_instructions.cachegrind_instructions(_cachegrind(tmp_path, "idle", "pass"))
    busy = watch_instructions.cachegrind_instructions(_cachegrind(tmp_path, "busy", "sum(range(100_000))"))
    again = watch_instructions.cachegrind_instructions(_cachegrind(tmp_path, "again", "sum(range(100_000))"))
    assert 0 < idle < busy
    assert abs(again - busy) / busy < 0.001  # the same code counts the same, to a tenth of a percent
    corrupt = tmp_path / "corrupt.cachegrind"
    corrupt.write_text("desc: cut short\nevents: Dr Dw\nsummary: 1 2\n")
    with pytest.raises(ValueError, match="no 'Ir' total"):
        watch_instructions.cachegrind_instructions(corrupt)


@pytest.mark.parametrize("side", ["plain", "watched"])
def test_each_side_generates_the_same_tokens(tiny_llama_dir, side):
    plain = watch_instructions.child("plain", str(tiny_llama_dir), 8, 4)
    other = watch_instructions.child(side, str(tiny_llama_dir), 8, 4)
    assert len(plain["tokens"]) == 4 and other["tokens"] == plain["tokens"]
    assert watch_instructions.child("load", str(tiny_llama_dir), 8, 4)["tokens"] == []


def test_the_load_is_subtracted_from_both_sides_of_every_length():
    tokens = {"tokens": [1, 2]}
    done = {
        ("load", 128, 32): {"instructions": 1_000},
        ("plain", 128, 32): {"instructions": 3_000, **tokens},
        ("watched", 128, 32): {"instructions": 3_020, **tokens},
        ("plain", 16, 512): {"instructions": 9_000, **tokens},
        ("watched", 16, 512): {"instructions": 9_400, "tokens": [1, 3]},
    }
    short, long = watch_instructions.compare(done, [(128, 32), (16, 512)])
    assert (short["plain_instructions"], short["watched_instructions"]) == (2_000, 2_020)
    assert short["ratio"] == pytest.approx(1.01) and short["added_per_new_token"] == pytest.approx(20 / 32)
    assert short["same_tokens"] and not long["same_tokens"]
    assert long["ratio"] == pytest.approx(8_400 / 8_000)
    assert watch_instructions.line(short).startswith("128 + 32 tokens, instructions of the whole run")
