"""kvlab.bench.configs: what runs, and the guide's claims beside each kind (from kvlab.measure.published)."""

from kvlab.bench import GUIDE, default_configs


def test_the_bench_reads_the_guide_table_in_lower_case_with_the_kinds_it_extends():
    assert GUIDE == {
        "none": {"sliding": "-", "offloading": "-", "compile": "-", "memory": "none"},
        "dynamic": {"sliding": "yes", "offloading": "yes", "compile": "no", "memory": "medium"},
        "static": {"sliding": "yes", "offloading": "yes", "compile": "yes", "memory": "high"},
        "offloaded": {"sliding": "yes", "offloading": "yes", "compile": "no", "memory": "low (device)"},
        "offloaded_static": {"sliding": "yes", "offloading": "yes", "compile": "yes", "memory": "low (device)"},
        "quantized": {"sliding": "no", "offloading": "no", "compile": "no", "memory": "low"},
    }
    assert all(c.cache_kind in GUIDE for c in default_configs(8, 4, compile=True))
