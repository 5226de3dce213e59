"""kvlab.quantized_backends: each backend's row is what the option checks, the crop rule, the size calculator, the
tables and the explorer act on, and what it claims of transformers' layer classes holds."""

from __future__ import annotations

import inspect
import re

import pytest
from transformers import cache_utils

from kvlab import _compat
from kvlab.bench import default_configs
from kvlab.caches.crop_rules import CacheCropError, check_quantized_residual
from kvlab.caches.options import GROUP_RULES, CacheOptionError, check_quantized_options
from kvlab.explorer.controls import options_for
from kvlab.models.tiny import tiny_config
from kvlab.quantized_backends import (
    ANY_AXES,
    ANY_NBITS,
    BACKEND_NAMES,
    BACKENDS,
    LAYOUTS,
    QUANTIZED_OPTIONS,
    table_rows,
)
from kvlab.size import architecture, cache_size, size_rows
from kvlab.size.packing import LAYOUT_BYTES

GROUP_WISE = [row for row in BACKENDS if row.group_wise]
PER_TENSOR = [row for row in BACKENDS if not row.group_wise]
NAMES = [row.name for row in BACKENDS]


def _refused(message: str):
    return pytest.raises(CacheOptionError, match=re.escape(message))


@pytest.mark.parametrize("row", GROUP_WISE, ids=lambda row: row.name)
def test_every_value_a_group_wise_row_takes_is_accepted_and_others_are_refused_naming_its_values(row):
    for nbits in row.nbits:
        for axis in row.axes:
            check_quantized_options(row.name, None, nbits=nbits, axis_key=axis, axis_value=axis)
    bad_nbits = next(n for n in range(1, 17) if n not in row.nbits)
    valid_nbits = ", ".join(map(str, row.nbits))
    with _refused(f"{row.name} nbits must be one of {valid_nbits}; got {bad_nbits}"):
        check_quantized_options(row.name, None, nbits=bad_nbits)
    bad_axis = next(a for a in (1, -1, 2) if a not in row.axes)
    for name in ("axis_key", "axis_value"):
        with _refused(f"{row.name} {name} must be one of {', '.join(map(str, row.axes))}; got {bad_axis}"):
            check_quantized_options(row.name, None, **{name: bad_axis})


@pytest.mark.parametrize("row", PER_TENSOR, ids=lambda row: row.name)
def test_a_per_tensor_row_refuses_every_group_wise_option_and_names_the_backends_that_take_them(row):
    check_quantized_options(row.name, None)
    valid = {"nbits": GROUP_WISE[0].nbits[0], "axis_key": 0, "axis_value": 0, "q_group_size": 32, "residual_length": 8}
    for name in QUANTIZED_OPTIONS:
        with pytest.raises(CacheOptionError) as refused:
            check_quantized_options(row.name, None, **{name: valid[name]})
        assert f"the {row.name} backend quantizes per tensor" in str(refused.value)
        assert all(other.name in str(refused.value).split("Use backend")[1] for other in GROUP_WISE)


def test_an_unknown_backend_is_refused_naming_every_row():
    with _refused(f"unknown quantization backend 'int4'; valid: {', '.join(NAMES)}"):
        check_quantized_options("int4", None)


@pytest.mark.parametrize("row", BACKENDS, ids=lambda row: row.name)
def test_a_row_says_what_transformers_layer_class_takes_and_names_it_back(row):
    layer_class = getattr(cache_utils, row.layer_class)
    parameters = {k: p for k, p in inspect.signature(layer_class.__init__).parameters.items() if k != "self"}
    assert {k: p.default for k, p in parameters.items()} == {k: row.defaults[k] for k in row.options}
    assert row.options in ((), QUANTIZED_OPTIONS)  # a backend takes every group-wise option or none
    cache = _compat.QuantizedCache(row.name, tiny_config("tiny-llama"))
    assert type(cache.layers[0]) is layer_class and _compat.quantized_backend(cache) == row.name


@pytest.mark.parametrize("row", BACKENDS, ids=lambda row: row.name)
def test_every_row_is_counted_by_its_layout_and_its_values_are_its_own(row):
    assert row.layout in LAYOUTS and row.layout in LAYOUT_BYTES
    assert row.group_wise == (row.layout in GROUP_RULES) == row.keeps_residual
    assert set(row.self_padding) <= set(row.nbits) and set(row.bench_nbits) <= set(row.nbits)
    assert set(row.nbits) <= set(ANY_NBITS) and set(row.axes) <= set(ANY_AXES)
    assert row.axes[:1] in ((), (0,))  # 0 first: the other axis is the last (`own_axis`)


@pytest.mark.parametrize("row", BACKENDS, ids=lambda row: row.name)
def test_the_crop_rule_and_the_size_calculator_read_whether_a_row_keeps_a_residual(row):
    if row.keeps_residual:
        check_quantized_residual(-2, row.name, 2)
    else:
        with pytest.raises(CacheCropError, match=rf"\({row.name}\) holds no full-precision residual \({row.name} "):
            check_quantized_residual(-2, row.name, 2)
    size = cache_size(architecture("smollm2"), "quantized", 10, prefill=5, backend=row.name)
    assert (size.residual_bytes > 0) == row.keeps_residual  # 5 decode tokens: in the residual, or quantized
    assert size.options == {"backend": row.name, **row.defaults}


def test_the_tables_show_every_row_at_its_widths_or_the_ones_chosen():
    arch = architecture("smollm2")
    labels = [r["label"] for r in size_rows(arch, 64) if r["cache_kind"] == "quantized"]
    assert labels == [label for label, _ in table_rows(lambda row: row.nbits)]
    assert len(labels) == sum(len(row.nbits) or 1 for row in BACKENDS)
    bench = [c.label for c in default_configs(8, 4) if c.cache_kind == "quantized"]
    assert len(bench) == sum(len(row.bench_nbits) or 1 for row in BACKENDS)
    for row in BACKENDS:
        chosen = [r for r in size_rows(arch, 64, backend=row.name) if r["cache_kind"] == "quantized"]
        assert {r["options"]["backend"] for r in chosen} == {row.name} and len(chosen) == max(len(row.nbits), 1)
    four = [r["label"] for r in size_rows(arch, 64, nbits=4) if r["cache_kind"] == "quantized"]
    assert four == [f"quantized {row.name} int4" for row in GROUP_WISE if 4 in row.nbits]


def test_a_table_gives_each_row_the_options_it_takes_an_axis_in_its_own_spelling():
    for label, options in table_rows(lambda row: row.nbits, axis_key=1, axis_value=-1, q_group_size=32):
        row = next(row for row in BACKENDS if options["backend"] == row.name)
        assert set(options) - {"backend"} == set(row.options) - {"residual_length"}, label
        if row.group_wise:  # 1 and -1 name the same axis: the one other than 0
            assert options["axis_key"] == options["axis_value"] == row.axes[-1] != 0
    (refused,) = size_rows(architecture("smollm2"), 64, backend=PER_TENSOR[0].name, nbits=4)[-1:]
    assert "quantizes per tensor" in refused["unsupported"]  # a named backend is given every option: refused


@pytest.mark.parametrize("row", BACKENDS, ids=lambda row: row.name)
def test_the_explorer_shows_the_options_a_row_takes(row):
    shown = options_for("quantized", row.name)
    assert [name for name in shown if name in QUANTIZED_OPTIONS] == list(row.options)
    assert "backend" in shown and BACKEND_NAMES == tuple(NAMES)
