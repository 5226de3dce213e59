"""Every backend of transformers' QuantizedCache, once, without torch: one row each, as `kvlab.cache_kinds` keeps
one per cache kind. The option checks, the size calculator, the crop rules, the command line, the bench and the
explorer read a backend's row rather than branch on its name, so a new backend is a row here plus its layer class
(ARCHITECTURE.md, "Adding a quantized backend"). What differs between transformers releases stays in `kvlab._compat`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

# The group-wise options of a quantized cache (transformers' QuantizedLayer), beside its `backend`.
QUANTIZED_OPTIONS = ("nbits", "axis_key", "axis_value", "q_group_size", "residual_length")
# transformers' QuantizedLayer defaults: every group-wise backend's (tests/test_quantized_backends.py reads them
# from the layer classes' signatures).
GROUP_WISE_DEFAULTS = {"nbits": 4, "axis_key": 0, "axis_value": 0, "q_group_size": 64, "residual_length": 128}
# How a backend stores a quantized tensor: `kvlab.size.packing` counts its bytes per layout and `kvlab.caches.options`
# checks its group sizes per layout. "hqq": hqq's bitpacking (a group's values packed into words along one axis of
# the (group, groups) reshape); "quanto": optimum-quanto's (the tensor grouped along an axis, its first dimension
# packed, rounded up); "per_tensor": every value in a byte, one scale for the whole tensor (fp8).
LAYOUTS = ("hqq", "quanto", "per_tensor")


@dataclass(frozen=True)
class QuantizedBackend:
    name: str  # QuantizedCache's `backend`, and a trace's options["backend"]
    help: str  # one line, for the command line's --backend
    layer_class: str  # transformers' layer class (`kvlab._compat`): how a cache built elsewhere names its backend
    layout: str  # how it stores a quantized tensor: one of LAYOUTS
    options: tuple[str, ...] = ()  # the group-wise options it takes: all or none (transformers' QuantizedCache rule)
    # nbits -> (values packed into one word, bytes of that word): its keys are the widths it takes
    words: dict[int, tuple[int, int]] = field(default_factory=dict)
    axes: tuple[int, ...] = ()  # the axis_key and axis_value it takes: 0, then its other axis
    defaults: dict = field(default_factory=dict)  # what a group-wise option is when not given
    self_padding: tuple[int, ...] = ()  # widths whose words pad a short packed dimension themselves
    value_bytes: int = 0  # a per-tensor layout: bytes of one stored value
    scale_bytes: int = 0  # ... and of its one scale
    bench_nbits: tuple[int, ...] = ()  # the widths `kvlab bench` measures unless --nbits names one
    builds_extension: bool = False  # its library compiles a C++ extension on first use per device type (a minute)

    @property
    def nbits(self) -> tuple[int, ...]:
        return tuple(self.words)

    @property
    def group_wise(self) -> bool:
        """Quantizes groups of `q_group_size` values, each with its own scale; else each tensor whole (fp8)."""
        return bool(self.options)

    @property
    def keeps_residual(self) -> bool:
        """Keeps the newest tokens in full precision until `residual_length` of them are quantized at once; else every
        token is quantized on arrival: a crop has no residual to cut, a chunk no flush to cross."""
        return "residual_length" in self.options

    def own_axis(self, axis: int) -> int:
        """`axis` in this backend's spelling: 0 is 0 everywhere, the other axis is hqq's 1 and quanto's -1 (the tables
        of `kvlab size` and `kvlab bench` take either for every backend); a value no backend takes stays as given."""
        return self.axes[-1] if self.axes and axis in OTHER_AXES and axis not in self.axes else axis


# fmt: off
BACKENDS = (
    # hqq's bitpack packs 8 / nbits values per uint8 word at 1, 2, 4 and 8 bits, 10 per int32 word at 3 bits (which
    # pad their rows themselves); elsewhere the packed dimension must divide by the values per word. At axis 0 hqq
    # packs along each group (`q_group_size` rows), so a group must hold whole words, else generate fails ("The size
    # of tensor a (3) must match the size of tensor b (4)"; measured on transformers 5.24, hqq 0.2.8, groups 1..1000).
    QuantizedBackend("hqq", "group-wise integers packed by hqq (kvlab pads the lengths it cannot pack)",
                     layer_class="HQQQuantizedLayer", layout="hqq", options=QUANTIZED_OPTIONS,
                     words={1: (8, 1), 2: (4, 1), 3: (10, 4), 4: (2, 1), 8: (1, 1)}, axes=(0, 1),
                     defaults=GROUP_WISE_DEFAULTS, self_padding=(3,), bench_nbits=(2, 4, 8)),
    QuantizedBackend("quanto", "group-wise integers packed by optimum-quanto (its C++ extension builds once)",
                     layer_class="QuantoQuantizedLayer", layout="quanto", options=QUANTIZED_OPTIONS,
                     words={2: (4, 1), 4: (2, 1)}, axes=(0, -1), defaults=GROUP_WISE_DEFAULTS, bench_nbits=(2, 4),
                     builds_extension=True),
    QuantizedBackend("fp8", "8-bit floats, one float32 scale per tensor, every token quantized on arrival",
                     layer_class="Fp8QuantizedLayer", layout="per_tensor", value_bytes=1, scale_bytes=4),
)
# fmt: on
BACKENDS_BY_NAME = {row.name: row for row in BACKENDS}
BACKEND_NAMES = tuple(BACKENDS_BY_NAME)
DEFAULT_BACKEND = "quanto"  # QuantizedCache requires one: what kvlab builds when none is given
OTHER_AXES = frozenset(axis for row in BACKENDS for axis in row.axes if axis != 0)
ANY_NBITS = tuple(sorted({nbits for row in BACKENDS for nbits in row.nbits}))  # one menu for every backend
ANY_AXES = tuple(sorted({axis for row in BACKENDS for axis in row.axes}))


def table_rows(
    widths: Callable[[QuantizedBackend], tuple[int, ...]], backend: str | None = None, nbits: int | None = None, **given
) -> list[tuple[str, dict]]:
    """(label, options) of the quantized rows of a table: every backend at each of its `widths` (`kvlab size`: every
    width it takes; `kvlab bench`: its `bench_nbits`), or only `backend`'s, only at `nbits`.

    An axis is given in the backend's own spelling (`spelled`). Without `backend`, each backend gets the options of
    `given` it takes, and `nbits` keeps only the backends that take a width. A named `backend` gets every option
    given, as `kvlab run` passes them: the option check refuses, in that row, a name no row has and what the
    backend does not take.
    """
    if backend is not None:
        named = BACKENDS_BY_NAME.get(backend)
        options = given if named is None else spelled(named, given)
        return [_table_row(backend, width, options) for width in _widths(named, widths, nbits)]
    rows = []
    for row in BACKENDS:
        if nbits is None or "nbits" in row.options:
            taken = spelled(row, {k: v for k, v in given.items() if k in row.options})
            rows += [_table_row(row.name, width, taken) for width in _widths(row, widths, nbits)]
    return rows


def spelled(row: QuantizedBackend, options: dict) -> dict:
    """`options` with `axis_key` and `axis_value` in `row`'s spelling (`QuantizedBackend.own_axis`)."""
    return {k: row.own_axis(v) if k in ("axis_key", "axis_value") else v for k, v in options.items()}


def _widths(row: QuantizedBackend | None, widths: Callable, nbits: int | None) -> tuple[int | None, ...]:
    """`nbits` if chosen, else the row's `widths`; (None,): one row without a width (fp8, or a name no row has)."""
    if nbits is not None:
        return (nbits,)
    return (widths(row) if row is not None else ()) or (None,)


def _table_row(backend: str, nbits: int | None, options: dict) -> tuple[str, dict]:
    if nbits is None:
        return f"quantized {backend}", {"backend": backend, **options}
    return f"quantized {backend} int{nbits}", {"backend": backend, "nbits": nbits, **options}
