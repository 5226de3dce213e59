"""bench/watch_direct.py on a tiny saved model: kvlab's own code timed in place, part by part, in real watched runs
(never a timing assert: only that each part is timed where it runs and the figures add up)."""

from __future__ import annotations

import sys

import pytest

from .conftest import bench_script


@pytest.fixture(scope="module")
def watch_direct():
    yield bench_script("watch_direct")
    sys.modules.pop("watch_direct", None)


def test_a_part_is_kvlabs_own_time_less_what_transformers_spends_inside_it(watch_direct):
    watched = {
        "kvlab_update": 0.013,
        "transformers_update": 0.011,
        "flush": 0.002,
        "pre_hook": 0.001,
        "post_hook": 0.004,
    }
    assert watch_direct.parts(watched) == pytest.approx({"update": 0.002, "flush": 0.002, "hooks": 0.003})


def test_each_part_is_timed_in_a_real_watched_run_and_the_methods_are_put_back(watch_direct, tiny_llama_dir):
    from kvlab.caches.base import InstrumentedCacheMixin
    from kvlab.recording.recorder import Recorder

    originals = (InstrumentedCacheMixin.__dict__["update"], Recorder.__dict__["flush"])
    timers = watch_direct.Timers()
    watch_direct.install(timers)
    try:
        side = watch_direct.Side(str(tiny_llama_dir), 8)
        timers.reset()  # the warm-up's
        row = watch_direct.breakdown(side, 4, 3, timers)
        plain_tokens, _ = side.generate(False, 4)
        assert set(timers.reset()) == {"transformers_update"}  # a plain run meets no kvlab code
    finally:
        timers.remove()
    assert (InstrumentedCacheMixin.__dict__["update"], Recorder.__dict__["flush"]) == originals
    assert row["same_tokens"] is True and row["runs"] == 3 and list(row["parts_ms"]) == ["update", "flush", "hooks"]
    assert row["parts_ms"]["flush"] > 0 and row["parts_ms"]["hooks"] > 0 and row["plain_ms"] > 0
    assert row["share"] == pytest.approx(row["total_ms"] / row["plain_ms"])
    assert watch_direct.line(8, 4, row).startswith("8 + 4 tokens, kvlab's own time in a watched run (median of 3")
