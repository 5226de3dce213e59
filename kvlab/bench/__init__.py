"""`kvlab bench`: the guide's comparison table, measured on this machine; orchestration only, every measurement
comes from `kvlab.measure`."""

from kvlab.bench.configs import GUIDE, BenchConfig, default_configs
from kvlab.bench.report import markdown_table
from kvlab.bench.runner import BenchSettings, run_bench

__all__ = ["GUIDE", "BenchConfig", "BenchSettings", "default_configs", "markdown_table", "run_bench"]
