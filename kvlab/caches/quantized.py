"""QuantizedCache, instrumented: KIVI-style packed storage plus a full-precision residual window.

Two guards where transformers 5.24 fails:
- hqq packs several values per byte along the first axis of its reshaped tensor, and with `axis=1` that axis
  has `batch * kv_heads * seq * head_dim / q_group_size` rows: 2-bit crashes unless it divides by 4, 4-bit on
  odd counts (`The size of tensor a (79) must match the size of tensor b (81)`). The guide's own 5-token
  prompt fails at 4 bits. `PaddedHQQQuantizedLayer` pads the sequence with zero tokens up to the next length
  that packs, and drops them again on dequantization. Lengths that already pack take transformers' path.
- `crop` on a quantized layer only shortens the residual while `get_seq_length` keeps counting the cropped
  tokens. kvlab crops the residual *and* the length, and refuses to cut into tokens already quantized.

optimum-quanto compiles a C++ extension, silently, the first time a quantized tensor is unpacked on a device type
(46-70 s on a CPU): a first `kvlab run` reported 8 tokens in 46 s, and `kvlab bench` quanto int2 at 0.1 tok/s
(11.5 once built). `ensure_quanto_extension` builds it after one line of notice, and kvlab calls it before any
clock starts (`kvlab models prepare`; `kvlab.run`, so `kvlab run` and the explorer; the bench); a quanto cache
calls it before its first update is recorded, which covers `kvlab.watch` and `kvlab.make_cache`.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.metadata
import os
import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from kvlab import _compat
from kvlab.caches.base import NO_PACKING, InstrumentedCacheMixin
from kvlab.caches.crop_rules import check_quantized_residual
from kvlab.caches.hqq_packing import hqq_needs_flatten, hqq_sequence_padding
from kvlab.caches.options import check_quantized_options
from kvlab.i18n import _
from kvlab.log import get_logger

log = get_logger(__name__)

if TYPE_CHECKING:
    from kvlab._compat import BaseQuantizedLayer

# optimum-quanto (0.2.7) registers one extension per device type its `quanto::unpack` kernel runs on; on ROCm
# torch's "cuda" device type is served by the HIP one. Device types without one fall back to quanto's Python code.
QUANTO_EXTENSIONS = {"cpu": "quanto_cpp", "cuda": "quanto_cuda", "mps": "quanto_mps"}
_quanto_ready: set[str] = set()  # device types whose extension is loaded in this process
QUANTO_LOAD_SECONDS = 2.0  # loading a built library takes milliseconds (36 ms measured); longer means it compiles


def _quanto_extension(device_type: str):
    """quanto's `Extension` object for `device_type`, or None where quanto has none registered."""
    from optimum.quanto.library.extensions import get_extension, is_extension_available

    name = "quanto_hip" if device_type == "cuda" and torch.version.hip else QUANTO_EXTENSIONS.get(device_type)
    return get_extension(name) if name is not None and is_extension_available(name) else None


def _extension_built(extension) -> bool:
    """What quanto itself checks before it loads: its build directory holds the library, built for this torch
    (another torch version makes quanto delete the directory and compile again)."""
    from torch.utils.cpp_extension import LIB_EXT

    build = Path(extension.build_directory)
    version = build / "pytorch_version.txt"
    built = (build / f"{extension.name}{LIB_EXT}").is_file() and version.is_file()
    return built and version.read_text().strip() == torch.__version__


def quanto_extension_pending(device: torch.device | str = "cpu") -> bool:
    """Whether the next quanto cache on `device`'s type will first compile the extension (about a minute): what
    a status line can say before it starts (`ensure_quanto_extension` prints it on stderr)."""
    device_type = torch.device(device).type
    return device_type not in _quanto_ready and _needs_build(_quanto_extension(device_type))


def _needs_build(extension) -> bool:
    return extension is not None and not _extension_built(extension)


def ensure_quanto_extension(device: torch.device | str = "cpu") -> None:
    """Build (the first time on this machine) and load optimum-quanto's C++ extension for `device`'s type.

    The build runs once per machine and torch version and says so in one line on stderr first; a built one only
    loads (milliseconds), silently. Later calls in the process return at once. Call it before timing anything
    that quantizes with quanto, so the build never lands in a measured time.
    """
    device_type = torch.device(device).type
    if device_type in _quanto_ready:
        return
    extension = _quanto_extension(device_type)
    if extension is not None:
        with _announced(at_once=_needs_build(extension)), _own_build_tools():
            extension.lib  # noqa: B018 - quanto builds (if needed) and loads the library on first access
    _quanto_ready.add(device_type)


@contextlib.contextmanager
def _own_build_tools():
    """The interpreter's own environment first on PATH while quanto loads its extension.

    torch's loader runs `ninja` from PATH on every load, and ninja decides whether to compile again. Two ninja
    versions (a venv's, from optimum-quanto's requirements, and a system one) read each other's build log as foreign
    and compile from scratch, about a minute: a process started without the venv on PATH rebuilt what `make
    extensions` had built. With the environment's own tools first, every process of that environment finds the same
    ninja, whatever the caller's PATH, so the build happens once per machine and torch."""
    tools = _environment_ninja_dir()
    path = os.environ.get("PATH", "")
    if tools is None or path.split(os.pathsep)[0] == tools:
        yield
        return
    os.environ["PATH"] = tools + os.pathsep + path
    try:
        yield
    finally:
        os.environ["PATH"] = path


def _environment_ninja_dir() -> str | None:
    """The directory of the ninja this interpreter's environment installed (optimum-quanto requires the `ninja`
    package): beside the interpreter, or where that package's files say (a venv layered over another, as
    .ci/oldest-transformers builds, has no ninja of its own). None when there is none."""
    beside = Path(sys.executable).parent
    if (beside / "ninja").is_file():
        return str(beside)
    try:
        files = importlib.metadata.distribution("ninja").files or ()
    except importlib.metadata.PackageNotFoundError:
        return None
    for file in files:
        if file.name == "ninja" and file.parent.name == "bin":
            located = Path(str(file.locate())).resolve()
            if located.is_file():
                return str(located.parent)
    return None


@contextlib.contextmanager
def _announced(at_once: bool):
    """The build notice before the block (`at_once`), or during it once it outlasts the load of a built library.

    A library the probe finds built can still be compiled again, since torch's ninja build decides (here two ninja
    versions on two PATHs rebuilt it at every switch between them), and a load waits while another process builds.
    A load longer than QUANTO_LOAD_SECONDS is one of those, and says so."""
    if at_once:
        _notice()
        yield
        return
    late = threading.Timer(QUANTO_LOAD_SECONDS, _notice)
    late.daemon = True
    late.start()
    try:
        yield
    finally:
        late.cancel()
        late.join()  # a notice being printed is finished before the caller's work starts


def _notice() -> None:
    notice = _("building optimum-quanto's C++ extension once (about 1 minute)…")
    log.warning("%s", notice)  # shown without any logging set up: kvlab/log.py


class PaddedHQQQuantizedLayer(_compat.HQQQuantizedLayer):
    """HQQQuantizedLayer that quantizes every length (see module docstring).

    Two fixes, each applied only where transformers' path fails, so every other case is bit-identical to it:
    the sequence is padded until hqq's packed axis divides by its pack factor, and at 3 bits on axis 1 the
    tensor is handed to hqq as 2-D (hqq's 3-bit unpacking reads `shape[0] * shape[1]` as the row count, which
    is only right for 2-D weights). Flattening keeps hqq's grouping: it reshapes the flat order either way.
    """

    def _quantize(self, tensor, axis):
        # tensor: (batch, kv_heads, seq, head_dim)
        pad = hqq_sequence_padding(tuple(tensor.shape), self.q_group_size, self.nbits, axis)
        flatten = hqq_needs_flatten(self.nbits, axis)
        if pad == 0 and not flatten:
            return super()._quantize(tensor, axis)
        padded = torch.nn.functional.pad(tensor, (0, 0, 0, pad))  # (batch, kv_heads, seq + pad, head_dim)
        to_quantize = padded.reshape(-1, padded.shape[-1]) if flatten else padded  # (rows, head_dim) when flat
        qtensor, meta = super()._quantize(to_quantize.contiguous(), axis)
        meta["kvlab_seq_len"], meta["kvlab_shape"] = tensor.shape[-2], tuple(padded.shape)
        return qtensor, meta

    def _dequantize(self, qtensor):
        tensor = super()._dequantize(qtensor)
        meta = qtensor[1]
        if "kvlab_shape" not in meta:
            return tensor
        return tensor.reshape(meta["kvlab_shape"])[:, :, : meta["kvlab_seq_len"], :]


@functools.cache
def _counting_class(layer_class: type[BaseQuantizedLayer]) -> type:
    """A subclass of `layer_class` that counts its `_quantize` / `_dequantize` calls and their elements.

    Single inheritance with no new state (the counts live in the instance's `__dict__`), so an existing layer's
    `__class__` can be swapped in place and back; the calls go to the layer's own methods untouched.
    """

    def _quantize(self, tensor, *args, **kwargs):
        counts = self.__dict__.setdefault("_kvlab_quant_work", [0, 0, 0, 0])
        counts[0] += 1
        counts[1] += int(tensor.numel())  # tensor: (batch, kv_heads, seq, head_dim)
        return layer_class._quantize(self, tensor, *args, **kwargs)

    def _dequantize(self, qtensor, *args, **kwargs):
        tensor = layer_class._dequantize(self, qtensor, *args, **kwargs)
        counts = self.__dict__.setdefault("_kvlab_quant_work", [0, 0, 0, 0])
        counts[2] += 1
        counts[3] += int(tensor.numel())
        return tensor

    methods = {"_quantize": _quantize, "_dequantize": _dequantize, "kvlab_counted_class": layer_class}
    return type(f"Counting{layer_class.__name__}", (layer_class,), methods)


class InstrumentedQuantizedCache(InstrumentedCacheMixin, _compat.QuantizedCache):
    """`transformers.QuantizedCache` (backends hqq, quanto, fp8) recording packed and residual bytes."""

    def __init__(self, backend: str, config, *args, trace=None, recorder=None, role: str = "self", **kwargs):
        check_quantized_options(backend, config, **kwargs)
        super().__init__(backend, config, *args, **kwargs)
        self.backend = backend
        self._kvlab_adopt_layers()
        self._kvlab_setup(config=config, trace=trace, recorder=recorder, role=role)

    def update(self, key_states, value_states, layer_idx: int, *args, **kwargs):
        # key_states: (batch, kv_heads, new_tokens, head_dim); quanto's first quantization would build its extension
        # inside the model's forward: built here instead, before the step's clock starts (kvlab.watch, make_cache)
        if self.backend == "quanto" and key_states.device.type not in _quanto_ready:
            ensure_quanto_extension(key_states.device)
        return super().update(key_states, value_states, layer_idx, *args, **kwargs)

    def _kvlab_adopt_layers(self) -> None:
        """Every layer counts its packing calls; hqq layers also become `PaddedHQQQuantizedLayer`. Both classes
        add no state, so they are switched in place (and back by `_kvlab_release_layers`)."""
        for layer in self.layers:
            if self.backend == "hqq" and type(layer) is _compat.HQQQuantizedLayer:
                layer.__class__ = PaddedHQQQuantizedLayer
            layer_type: type = type(layer)  # plain `type`: hashable to mypy (python/mypy#11470); every layer quantizes
            if not hasattr(layer_type, "kvlab_counted_class"):
                layer.__class__ = _counting_class(layer_type)

    def _kvlab_release_layers(self) -> None:
        """Undo `_kvlab_adopt_layers` (used when `kvlab.watch` gives a cache back)."""
        for layer in self.layers:
            layer.__class__ = getattr(type(layer), "kvlab_counted_class", type(layer))
            layer.__dict__.pop("_kvlab_quant_work", None)
            if type(layer) is PaddedHQQQuantizedLayer:
                layer.__class__ = _compat.HQQQuantizedLayer

    def _kvlab_layer_work(self, layer_idx: int) -> tuple:
        """The packing calls this layer made since its last update event (then the count starts again)."""
        return tuple(self.layers[layer_idx].__dict__.pop("_kvlab_quant_work", NO_PACKING))

    def _kvlab_check_crop(self, tokens_to_remove: int) -> None:
        super()._kvlab_check_crop(tokens_to_remove)
        residual = min((_compat.quantized_residual_length(layer) for layer in self.layers), default=0)
        check_quantized_residual(tokens_to_remove, self.backend, residual)

    def _kvlab_crop_layers(self, tokens_to_remove: int) -> None:
        for layer in self.layers:
            _compat.crop_quantized_length(layer, tokens_to_remove)  # transformers' crop only shortens the residual
        super()._kvlab_crop_layers(tokens_to_remove)
