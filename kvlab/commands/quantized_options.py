"""The quantized options of `kvlab run`, `kvlab size` and `kvlab bench`, declared once, their help written from the
backends' rows (`kvlab.quantized_backends`), so a new backend's values appear in all three. `run` hands them to the
one cache it builds; `size` and `bench`, which show a row per backend and width, read `--backend` and `--nbits` as
a choice of rows and give the other options to every backend that takes them. Torch-free: the parser stays light.
"""

from __future__ import annotations

from collections.abc import Callable

from kvlab.quantized_backends import (
    BACKENDS,
    DEFAULT_BACKEND,
    GROUP_WISE_DEFAULTS,
    QUANTIZED_OPTIONS,
    QuantizedBackend,
    spelled,
)

NAMES = ("backend", *QUANTIZED_OPTIONS)  # as the parsers store them


def _values(values: Callable[[QuantizedBackend], tuple]) -> str:
    """ "hqq 1, 2, 3, 4, 8; quanto 2, 4": each group-wise backend's values."""
    return "; ".join(f"{row.name} {', '.join(map(str, values(row)))}" for row in BACKENDS if row.group_wise)


def add_quantized_options(parser, rows: Callable[[QuantizedBackend], tuple[int, ...]] | None = None) -> None:
    """`--backend --nbits --axis-key --axis-value --q-group-size --residual-length` on `parser`: for the one cache
    of `kvlab run`, or, given `rows` (the widths a table shows per backend), the choice of a table's quantized rows."""
    group_wise = ", ".join(row.name for row in BACKENDS if row.group_wise)
    backends = "; ".join(f"{row.name}: {row.help}" for row in BACKENDS)
    axes = _values(lambda row: row.axes) + ("" if rows is None else "; here 1 and -1 both name the axis other than 0")
    what = {
        "nbits": f"bits per value, {_values(lambda row: row.nbits)}",
        "axis_key": f"the axis the keys are grouped along, {axes}",
        "axis_value": f"the axis the values are grouped along, {axes}",
        "q_group_size": "values quantized with one scale",
        "residual_length": "the newest tokens kept in full precision, quantized together once there are that many",
    }
    helps = {name: f"{group_wise}: {what[name]} (default: {GROUP_WISE_DEFAULTS[name]})" for name in QUANTIZED_OPTIONS}
    group = parser.add_argument_group("quantized cache options")
    if rows is None:
        group.add_argument("--backend", help=f"quantized: {backends} (default: {DEFAULT_BACKEND})")
    else:
        group.add_argument("--backend", help=f"only this backend's quantized rows (default: every backend): {backends}")
        valid = _values(lambda row: row.nbits)
        shown = "every width" if _values(rows) == valid else _values(rows)
        helps["nbits"] = (
            f"only the quantized rows of this width, of the backends that take one (default: {shown}); valid: {valid}"
        )
    for name, text in helps.items():
        group.add_argument(f"--{name.replace('_', '-')}", type=int, help=text)


def chosen_rows(args) -> dict:
    """The quantized options given to `kvlab size` or `kvlab bench`, for `kvlab.quantized_backends.table_rows`. With
    `--backend`, they are checked against its row (an axis in its spelling) before any work: the same one-line
    refusal as `kvlab run`."""
    chosen = {name: getattr(args, name) for name in NAMES if getattr(args, name) is not None}
    if "backend" in chosen:
        from kvlab.caches.options import check_backend, check_quantized_options

        given = spelled(check_backend(chosen["backend"]), {k: v for k, v in chosen.items() if k != "backend"})
        check_quantized_options(chosen["backend"], None, **given)
    return chosen
