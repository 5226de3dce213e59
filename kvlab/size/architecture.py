"""What the KV cache of a model looks like, from its config alone: its `ModelFacts` (`kvlab.model_facts`), where
they came from, and what each cache layer holds (`layers`, measured on the meta device by `kvlab.size.meta`).

Well-known models ship in `kvlab/data/architectures.json` (copied from their public config.json), with
transformers' reading of them stored beside it (`python -m tools.architecture_facts`), so a known name is
sized without torch; transformers itself decides which layer slides or what an MLA or linear layer keeps. An
encoder-only config (BERT) is refused: it keeps no KV cache, so any size would be invented (XLM, whose causal-LM
class caches in `generate`, is sized).
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field, fields
from pathlib import Path

from kvlab.errors import KvlabUserError
from kvlab.i18n import _
from kvlab.model_facts import ModelFacts, model_facts


class UnknownArchitectureError(KvlabUserError, ValueError):
    """A model name that is not in kvlab's architecture facts."""


class NoKVCacheError(KvlabUserError, ValueError):
    """A config whose model keeps no KV cache (encoder-only): there is nothing to size."""


@dataclass(frozen=True)
class Architecture:
    """A model's `ModelFacts` (whose fields it answers as its own: `arch.layer_kinds`), and where they came from."""

    name: str
    source: str  # where the facts come from: a hub repo, a config file, or a live config object
    facts: ModelFacts
    dtype: str | None = None  # the dtype the published weights use
    # one of kvlab's own models, which kvlab.load runs in float32 unless asked otherwise (not a structural fact)
    bundled: bool = field(default=False, compare=False)
    note: str = ""
    # a transformers config object, or the config keys to build one from (known architectures, see `config`)
    config_source: object = field(default=None, repr=False, compare=False)
    # each cache layer's facts, stored for a known architecture; else measured on first use (see `layers`)
    layer_facts: tuple | None = field(default=None, repr=False, compare=False)

    def __getattr__(self, name: str):
        if name.startswith("__") or name == "facts":  # copying and pickling look before `facts` is set
            raise AttributeError(name)
        return getattr(self.facts, name)

    @functools.cached_property
    def layers(self) -> tuple:
        """Each cache layer's `LayerFacts` in update order: stored for a known architecture, else measured on the
        meta device (imports torch, about a second)."""
        if self.layer_facts is not None:
            return self.layer_facts
        from kvlab.size.meta import layer_facts

        return layer_facts(self.config, self.layer_kinds)

    @functools.cached_property
    def config(self):
        """The transformers config; for a known architecture built from its shipped keys on first use, so `kvlab
        size` on a known model imports no transformers."""
        if isinstance(self.config_source, dict):
            return _config_from_dict(self.config_source)
        return self.config_source

    def counts(self) -> dict[str, int]:
        return {layer_kind: self.layer_kinds.count(layer_kind) for layer_kind in dict.fromkeys(self.layer_kinds)}

    def describe(self) -> str:
        layers = ", ".join(f"{n} {layer_kind}" for layer_kind, n in self.counts().items())
        caps = []
        if self.sliding_window and "sliding" in self.layer_kinds:
            caps.append(f"sliding window {self.sliding_window}")
        if self.chunk_size and "chunked" in self.layer_kinds:
            caps.append(f"chunk {self.chunk_size}")
        heads = (
            f"; {self.attention_heads} attention heads, {self.kv_heads} KV heads x {self.head_dim}"
            if self.kv_heads
            else ""
        )
        if self.linear_state:
            channels, conv_kernel, state_size = self.linear_state
            heads += f"; linear state {channels} channels x (conv {conv_kernel} + state {state_size})"
        if self.layer_facts is not None or "layers" in self.__dict__:  # only what is known without a meta run
            per_token = sum(f.elements.per_token for f in self.layers if f.kind != "cross")
            if per_token:
                heads += f"; {per_token:,} cached numbers per token"
        extra = f" ({', '.join(caps)})" if caps else ""
        return f"{self.name} [{self.source}]: {len(self.layer_kinds)} layers: {layers}{extra}{heads}"


def _facts() -> dict:
    from kvlab.size.meta import shipped  # its module imports torch only inside its functions

    return shipped("data/architectures.json")


def known_architectures() -> list[str]:
    return list(_facts())


def from_config(
    config, name: str | None = None, source: str = "config", dtype: str | None = None, note: str = ""
) -> Architecture:
    """The architecture of a transformers config, or of its `ModelFacts` already read (a checked request's); an
    encoder-only one is refused."""
    facts = model_facts(config)
    if (reason := facts.encoder_only) and not _caches_in_generate(facts):
        what = source if source != "config" else name or _("this config")
        raise NoKVCacheError(
            _(
                "{what} is an encoder-only model ({reason}): it reads its whole input in one pass and keeps no KV "
                "cache, so there is nothing to size. kvlab size takes decoder-only and encoder-decoder models (a "
                "BERT-style config with is_decoder: true is a decoder)."
            ).format(what=what, reason=reason)
        )
    return Architecture(name or facts.model_type, source, facts, dtype, note=note, config_source=facts.config)


def _caches_in_generate(facts: ModelFacts) -> bool:
    """A masked-LM model type whose config has no `is_decoder` flag (BERT's convention: the flag says) but a
    causal-LM class: XLM's `XLMWithLMHeadModel` fills a DynamicCache in `generate` whatever its `causal` flag (which
    only shapes the mask), and kvlab's trace counts that cache; so `kvlab size` sizes it."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    text = facts.config.get_text_config(decoder=True)
    return not hasattr(text, "is_decoder") and text.model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES


def _config_from_dict(data: dict):
    import transformers

    data = dict(data)
    model_type = data.pop("model_type", None)
    if model_type is None:
        raise ValueError(_("the config has no 'model_type'; kvlab needs it to let transformers read the layer kinds"))
    try:
        return transformers.AutoConfig.for_model(model_type, **data)
    except ValueError as err:
        version = transformers.__version__
        raise ValueError(
            _("transformers {version} does not know model_type {model_type!r}: {err}").format(
                version=version, model_type=model_type, err=err
            )
        ) from err


def architecture(name: str) -> Architecture:
    """The architecture of a known model name (see `known_architectures()`)."""
    facts = _facts()
    if name not in facts:
        raise UnknownArchitectureError(
            _("unknown model {name!r}; known: {known} (or give --config FILE)").format(
                name=name, known=", ".join(facts)
            )
        )
    entry = facts[name]
    from kvlab.size.meta import shipped, shipped_facts

    derived = shipped(DERIVED_FILE)[name]  # transformers' reading of entry["config"], stored by write_derived_facts

    facts = ModelFacts(
        **{k: tuple(v) if isinstance(v, list) else v for k, v in derived.items()},
        max_positions=entry["config"].get("max_position_embeddings"),  # the config's own key, read without transformers
    )
    return Architecture(
        name,
        entry["source"],
        facts,
        entry.get("dtype"),
        bundled=entry.get("bundled", False),
        note=entry.get("note", ""),
        config_source=entry["config"],
        layer_facts=shipped_facts()[name],
    )


# What transformers derives from a known architecture's config, stored: the facts `ModelFacts` compares, but the
# positions, which `architecture` reads from the config's own key.
DERIVED_FIELDS = tuple(f.name for f in fields(ModelFacts) if f.compare and f.name != "max_positions")
DERIVED_FILE = "data/architectures_derived.json"


def derived_facts(config) -> dict:
    """What transformers makes of a config, as stored in `kvlab/data/architectures_derived.json`."""
    arch = from_config(config)
    return {k: list(v) if isinstance(v, tuple) else v for k, v in ((f, getattr(arch, f)) for f in DERIVED_FIELDS)}


def from_model_type(model_type: str) -> Architecture:
    """The architecture of transformers' default config for `model_type` (for many types the published model:
    deepseek_v3 is DeepSeek-V3), sized on the meta device."""
    import transformers

    try:
        config = transformers.AutoConfig.for_model(model_type)
    except ValueError:
        raise UnknownArchitectureError(
            _(
                "transformers {version} has no model_type {model_type!r} (transformers.CONFIG_MAPPING lists them)"
            ).format(version=transformers.__version__, model_type=model_type)
        ) from None
    source = f"transformers {transformers.__version__} defaults of model_type {model_type}"
    return from_config(config, name=model_type, source=source)


def from_config_file(path: str | Path) -> Architecture:
    """The architecture of a config.json on disk (read as JSON; nothing is executed)."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(_("config file {path} does not exist").format(path=path))
    try:
        data = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise ValueError(
            _("{path} does not parse as JSON ({error} at line {line})").format(
                path=path, error=err.msg, line=err.lineno
            )
        ) from err
    if not isinstance(data, dict):
        raise ValueError(_("{path} is not a config.json: expected a JSON object").format(path=path))
    dtype = data.get("torch_dtype") or data.get("dtype")
    return from_config(_config_from_dict(data), name=path.parent.name or path.stem, source=str(path), dtype=dtype)
