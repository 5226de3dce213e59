"""The models the explorer can run: the bundled real ones, two tiny random ones, or one the user already loaded.

Tiny models have no tokenizer: `ByteTokenizer` maps text into their 128-token vocabulary (what they generate is
noise: they show cache *structure*, e.g. tiny-gemma3's window of 8). Torch-free until a model loads.
"""

from __future__ import annotations

import threading
from types import SimpleNamespace

from kvlab.i18n import _
from kvlab.names import dtype_name

LOADED = "loaded"  # the choice shown for a model passed to `explore(model=..., tokenizer=...)`
BUNDLED_CHOICES = ("smollm2", "gemma3")
TINY_CHOICES = ("tiny-llama", "tiny-gemma3")
DTYPES = ("float32", "bfloat16")
# `kvlab.models.BUNDLED`'s facts (a test checks they agree), here to tick the chat box before torch is imported.
CHAT_TEMPLATES = {"smollm2": True, "gemma3": False}


class ByteTokenizer:
    """UTF-8 bytes folded into the tiny models' ids 3..127 (0 pad, 1 bos, 2 eos); decodes ids as `‹id›`."""

    pad_token_id = 0
    eos_token_id = 2
    chat_template = None
    FIRST_ID, VOCAB = 3, 128

    def encode(self, text: str) -> list[int]:
        span = self.VOCAB - self.FIRST_ID
        return [self.FIRST_ID + b % span for b in text.encode("utf-8")]

    def __call__(self, text: str, return_tensors: str = "pt", add_special_tokens: bool = True):
        import torch

        return SimpleNamespace(input_ids=torch.tensor([self.encode(text)], dtype=torch.long))  # (1, prompt_tokens)

    def decode(self, ids, skip_special_tokens: bool = True) -> str:
        ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)  # a tensor, or a list of ids
        return "".join(f"‹{i}›" for i in ids)


def model_choices(has_loaded: bool) -> list[str]:
    return ([LOADED] if has_loaded else []) + list(BUNDLED_CHOICES) + list(TINY_CHOICES)


# Shared by every explorer in the process: two explorers in one notebook must not hold two copies of the weights.
_SHARED_LOCK = threading.Lock()
_SHARED: dict[tuple[str, str], tuple] = {}


class ModelStore:
    """(model, tokenizer) by (name, dtype), each loaded once per process, under a lock: Run and a warm-up may race."""

    def __init__(self, model=None, tokenizer=None):
        self._lock = _SHARED_LOCK
        self._models: dict[tuple[str, str], tuple] = _SHARED if model is None else dict(_SHARED)
        self.loaded_dtype = None if model is None else dtype_name(model.dtype)
        if model is not None:
            if not hasattr(model, "kvlab_name"):
                model.kvlab_name = getattr(model.config, "model_type", LOADED)
            self._models[(LOADED, self.loaded_dtype)] = (model, tokenizer if tokenizer is not None else ByteTokenizer())

    @property
    def has_loaded(self) -> bool:
        return self.loaded_dtype is not None

    def is_ready(self, name: str, dtype: str) -> bool:
        key = self._key(name, dtype)
        return key in self._models or key in _SHARED

    def _key(self, name: str, dtype: str) -> tuple[str, str]:
        if name == LOADED:
            if not self.has_loaded:
                valid = ", ".join(model_choices(False))
                raise ValueError(_("no model was passed to explore(); choose one of {valid}").format(valid=valid))
            return (LOADED, self.loaded_dtype)  # an already-loaded model keeps its own dtype
        if name not in BUNDLED_CHOICES + TINY_CHOICES:
            valid = ", ".join(model_choices(self.has_loaded))
            raise ValueError(_("unknown model {name!r}; valid: {valid}").format(name=name, valid=valid))
        if dtype not in DTYPES:
            valid = ", ".join(DTYPES)
            raise ValueError(_("unsupported dtype {dtype!r}; valid: {valid}").format(dtype=dtype, valid=valid))
        return (name, dtype)

    def has_chat_template(self, name: str) -> bool:
        """Whether model `name`'s tokenizer has a chat template."""
        if name == LOADED:
            return self.has_loaded and getattr(self.get(LOADED)[1], "chat_template", None) is not None
        return CHAT_TEMPLATES.get(name, False)  # tiny models' ByteTokenizer has none

    def get(self, name: str, dtype: str = "float32"):
        key = self._key(name, dtype)
        with self._lock:
            if key not in self._models and key in _SHARED:  # loaded by another explorer since this one was made
                self._models[key] = _SHARED[key]
            if key not in self._models:
                self._models[key] = _SHARED[key] = _load(name, dtype)
            return self._models[key]


def _load(name: str, dtype: str):
    if name in TINY_CHOICES:
        from kvlab.models import parse_dtype
        from kvlab.models.tiny import tiny_model

        model = tiny_model(name, dtype=parse_dtype(dtype))
        model.kvlab_name = name
        return model, ByteTokenizer()
    from kvlab.models import load

    return load(name, dtype=dtype)
