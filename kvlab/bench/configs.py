"""The configurations `kvlab bench` compares, and what transformers' cache guide says about each kind."""

from __future__ import annotations

from dataclasses import dataclass, field

from kvlab.measure import published
from kvlab.quantized_backends import table_rows


def _guide_cells(cache_kind: str) -> dict:
    """The guide's row for `cache_kind` (`kvlab.measure.published.GUIDE`) as the bench's lower-case columns."""
    row = published.GUIDE[cache_kind]
    columns = {"sliding": "sliding layers", "offloading": "offloading", "compile": "torch.compile", "memory": "memory"}
    return {column: row[prop].lower() for column, prop in columns.items()}


# What kvlab puts numbers next to, per cache kind: the guide's table, and for the kinds it has no row for, the row
# they extend (an offloaded cache is the dynamic or static one, holding little on the device) or nothing at all.
GUIDE = {
    "none": {"sliding": "-", "offloading": "-", "compile": "-", "memory": "none"},
    "dynamic": _guide_cells("dynamic"),
    "static": _guide_cells("static"),
    "offloaded": {**_guide_cells("dynamic"), "memory": "low (device)"},
    "offloaded_static": {**_guide_cells("static"), "memory": "low (device)"},
    "quantized": _guide_cells("quantized"),
}


@dataclass(frozen=True)
class BenchConfig:
    """One row of the bench: a cache kind with its options, run instrumented unless `plain`."""

    label: str
    cache_kind: str
    options: dict = field(default_factory=dict)
    compile: bool = False  # static + torch.compile
    plain: bool = False  # transformers' own cache class, not kvlab's instrumented one (overhead, reasons)

    def to_dict(self) -> dict:
        return {
            "label": self.label,
            "cache": self.cache_kind,
            "options": dict(self.options),
            "compile": self.compile,
            "instrumented": not self.plain,
        }


def default_configs(prompt_tokens: int, new_tokens: int, compile: bool = False, **quantized) -> list[BenchConfig]:
    """none, dynamic, static (+ compile), offloaded kinds, plain dynamic and offloaded, then the quantized rows: each
    backend at its `bench_nbits` (hqq 2/4/8, quanto 2/4, fp8), or those `quantized` (`kvlab bench --backend
    --nbits ...`) chooses (`kvlab.quantized_backends.table_rows`)."""
    length = prompt_tokens + new_tokens
    configs = [
        BenchConfig("none", "none"),
        BenchConfig("dynamic", "dynamic"),
        BenchConfig("dynamic (plain transformers)", "dynamic", plain=True),
        BenchConfig("static", "static", {"max_cache_len": length}),
    ]
    if compile:
        configs.append(BenchConfig("static + torch.compile", "static", {"max_cache_len": length}, compile=True))
    configs += [
        BenchConfig("offloaded", "offloaded"),
        BenchConfig("offloaded (plain transformers)", "offloaded", plain=True),
        BenchConfig("offloaded_static", "offloaded_static", {"max_cache_len": length}),
    ]
    rows = table_rows(lambda backend: backend.bench_nbits, **quantized)
    return configs + [BenchConfig(label, "quantized", options) for label, options in rows]
