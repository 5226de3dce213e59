"""QuantizedCache, instrumented: KIVI-style packed storage plus a full-precision residual window.

Two guards where transformers 5.24 fails: hqq cannot pack every length (`PaddedHQQQuantizedLayer` pads the
sequence to one that packs, and drops the padding on dequantization), and `crop` shortens the residual while
`get_seq_length` keeps counting (kvlab crops both, and refuses to cut into quantized tokens).

optimum-quanto compiles a C++ extension silently the first time it unpacks on a device type (46-70 s on a CPU);
`ensure_quanto_extension` builds it after one line of notice, before any clock starts.
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
from kvlab.model_facts import model_facts
from kvlab.quantized_backends import BACKENDS_BY_NAME

log = get_logger(__name__)

if TYPE_CHECKING:
    from kvlab._compat import BaseQuantizedLayer

# optimum-quanto's extension per device type (ROCm's "cuda" is served by quanto_hip); others use quanto's Python
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
    """Whether the next quanto cache on `device`'s type will first compile the extension (about a minute)."""
    device_type = torch.device(device).type
    return device_type not in _quanto_ready and _needs_build(_quanto_extension(device_type))


def _needs_build(extension) -> bool:
    return extension is not None and not _extension_built(extension)


def ensure_quanto_extension(device: torch.device | str = "cpu") -> None:
    """Build (once per machine and torch version, with a notice) and load optimum-quanto's C++ extension for
    `device`'s type. Call it before timing anything that quantizes with quanto."""
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

    torch's loader runs `ninja` from PATH on every load, and two ninja versions (a venv's and a system one) read each
    other's build log as foreign and compile again from scratch: the same ninja every time builds once."""
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
    """The directory of the ninja this interpreter's environment installed: beside the interpreter, or where the
    `ninja` package's files say (a venv layered over another has none of its own); None when there is none."""
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
    """The build notice before the block (`at_once`), or during it once it outlasts QUANTO_LOAD_SECONDS: a library
    found built can still be rebuilt by ninja, or wait on another process's build."""
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
    """HQQQuantizedLayer that quantizes every length; bit-identical to transformers' wherever that path works.

    The sequence is padded until hqq's packed axis divides by its pack factor, and at 3 bits on axis 1 the tensor
    is handed over as 2-D (`hqq_needs_flatten`); flattening keeps hqq's grouping, which reshapes the flat order."""

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


# kvlab's fixes of transformers' layer classes: each replaces, in place, a layer of the class it subclasses.
FIXED_LAYERS: dict[type, type] = {cls.__bases__[0]: cls for cls in (PaddedHQQQuantizedLayer,)}


@functools.cache
def _counting_class(layer_class: type[BaseQuantizedLayer]) -> type:
    """A subclass of `layer_class` that counts its `_quantize` / `_dequantize` calls and their elements.

    No new state (the counts live in the instance's `__dict__`), so a layer's `__class__` can be swapped in place."""

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
        check_quantized_options(backend, model_facts(config), **kwargs)
        super().__init__(backend, config, *args, **kwargs)
        self.backend = backend
        self._kvlab_adopt_layers()
        self._kvlab_setup(config=config, trace=trace, recorder=recorder, role=role)

    def update(self, key_states, value_states, layer_idx: int, *args, **kwargs):
        # quanto's first quantization would build its extension inside the forward (its row's `builds_extension`):
        # built before the step's clock
        if BACKENDS_BY_NAME[self.backend].builds_extension and key_states.device.type not in _quanto_ready:
            ensure_quanto_extension(key_states.device)
        return super().update(key_states, value_states, layer_idx, *args, **kwargs)

    def _kvlab_adopt_layers(self) -> None:
        """Every layer counts its packing calls; a layer kvlab fixes also becomes its fix (`FIXED_LAYERS`: hqq's
        become `PaddedHQQQuantizedLayer`), both in place."""
        for layer in self.layers:
            layer.__class__ = FIXED_LAYERS.get(type(layer), type(layer))
            layer_type: type = type(layer)  # plain `type`: hashable to mypy (python/mypy#11470); every layer quantizes
            if not hasattr(layer_type, "kvlab_counted_class"):
                layer.__class__ = _counting_class(layer_type)

    def _kvlab_release_layers(self) -> None:
        """Undo `_kvlab_adopt_layers`."""
        for layer in self.layers:
            layer.__class__ = getattr(type(layer), "kvlab_counted_class", type(layer))
            layer.__dict__.pop("_kvlab_quant_work", None)
            if type(layer) in FIXED_LAYERS.values():
                layer.__class__ = type(layer).__bases__[0]

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
