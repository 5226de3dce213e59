"""The continuous-batching bench row is the measurement of `kvlab.measure.batching` (tested there)."""

import kvlab.bench.batching
import kvlab.measure.batching


def test_the_bench_row_is_the_measure():
    assert kvlab.bench.batching.batching_row is kvlab.measure.batching.batching_row
