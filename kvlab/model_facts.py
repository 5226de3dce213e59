"""The facts about a model that its KV cache depends on, read once from its config.

The option checks, the textbook formula and the size calculator all start from `model_facts(config)`, so they
never read one config three ways. Reading is not free (transformers derives the layer kinds on every call), so an
entry point reads the facts once and hands them down: `model_facts` returns facts it is given unchanged. No torch
or transformers import until a config is read: the command line checks options before any model loads.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

from kvlab import _compat
from kvlab.recording.layer_kinds import layer_kinds


@dataclass(frozen=True)
class ModelFacts:
    model_type: str  # the config's own (a multimodal model's, not its text part's)
    layer_kinds: tuple[str, ...]  # "full" | "sliding" | "chunked" | "linear" | "dummy", one per (decoder) layer
    kv_heads: int
    head_dim: int
    attention_heads: int
    # the queries' heads as work counts them (`_compat.query_heads`); like the encoder's positions, not in the
    # shipped facts of known architectures, so left out of equality
    query_heads: int | tuple[int, ...] = field(default=0, compare=False)
    sliding_window: int | None = None
    chunk_size: int | None = None  # attention_chunk_size: the window of a chunked layer
    is_encoder_decoder: bool = False
    # linear-attention (Mamba-style) state per layer: (channels, conv_kernel, state_size); None without linear layers
    # or for a model type whose state kvlab does not know (the size calculator refuses it)
    linear_state: tuple[int, int, int] | None = None
    max_positions: int | None = None  # the decoder's positions (`position_limit`)
    encoder_max_positions: int | None = field(default=None, compare=False)  # an encoder-decoder's encoder positions
    config: object = field(default=None, repr=False, compare=False)  # the transformers config they were read from

    @functools.cached_property
    def layer_flags(self) -> tuple[tuple[bool, bool], ...]:
        """(attention, sliding) per layer, as transformers' DynamicCache lays them out; read on first use (it builds
        an empty cache, and only the offloading rule asks)."""
        return tuple(_compat.layer_flags(self.config))

    @functools.cached_property
    def encoder_only(self) -> str:
        """Why an encoder-only model (BERT, RoBERTa, ...) keeps no KV cache, in the config's words ("model_type
        'bert'; is_decoder false; architectures BertForMaskedLM"); "" for a model that keeps one. The signal is a
        masked-LM model type, not encoder-decoder, without `is_decoder: true` (XLM: `causal: true`); not the class
        names, nor is_decoder alone (GPT-NeoX says false, and is a decoder)."""
        if self.is_encoder_decoder:
            return ""
        text = self.config.get_text_config(decoder=True)
        if getattr(text, "is_decoder", False) or getattr(text, "causal", False):
            return ""
        if text.model_type not in _compat.masked_lm_model_types():
            return ""
        decoder = "is_decoder false" if hasattr(text, "is_decoder") else "no is_decoder"
        facts = [f"model_type {text.model_type!r}", decoder]
        architectures = getattr(self.config, "architectures", None) or []
        if architectures:
            facts.append(f"architectures {', '.join(architectures)}")
        return "; ".join(facts)


def model_facts(config) -> ModelFacts:
    """The cache-relevant facts of a transformers config; `ModelFacts` are returned as they are."""
    if isinstance(config, ModelFacts):
        return config
    text = config.get_text_config(decoder=True)
    kinds = tuple(layer_kinds(config))
    heads = _first(text, "num_attention_heads", "decoder_attention_heads", default=0)
    hidden = _first(text, "hidden_size", "d_model", default=0)
    encoder_decoder = bool(getattr(config, "is_encoder_decoder", False))
    return ModelFacts(
        model_type=config.model_type,
        layer_kinds=kinds,
        kv_heads=int(_first(text, "num_key_value_heads", default=None) or heads),
        head_dim=int(_first(text, "head_dim") or (hidden // heads if heads else 0)),
        attention_heads=int(heads),
        query_heads=_compat.query_heads(text),
        sliding_window=_first(text, "sliding_window"),
        chunk_size=_first(text, "attention_chunk_size"),
        is_encoder_decoder=encoder_decoder,
        linear_state=_linear_state(text) if "linear" in kinds else None,
        max_positions=position_limit(config),
        encoder_max_positions=position_limit(config, encoder=True) if encoder_decoder else None,
        config=config,
    )


def position_limit(config, encoder: bool = False) -> int | None:
    """The positions a model was built for (`max_position_embeddings`; Whisper's decoder says
    `max_target_positions`); None where there is no such limit (Mamba's state, T5's relative positions)."""
    text = config.get_text_config(encoder=True) if encoder else config.get_text_config(decoder=True)
    for name in ("max_position_embeddings",) if encoder else ("max_position_embeddings", "max_target_positions"):
        value = getattr(text, name, None)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            return value
    return None


def tokens_held(prompt_tokens: int, new_tokens: int, encoder_decoder: bool = False) -> int:
    """The most tokens a generation's cache holds, and the positions it uses: `generate` feeds back every new token
    but the last (prompt + new - 1, at least the prompt); an encoder-decoder's decoder holds its new tokens."""
    new_tokens = max(new_tokens, 1)
    return new_tokens if encoder_decoder else prompt_tokens + new_tokens - 1


def _first(obj, *names, default=None):
    """The first of `names` that `obj` sets; a per-layer attribute of a heterogeneous config, which transformers
    refuses to read globally (a RuntimeError), counts as unset."""
    for name in names:
        try:
            value = getattr(obj, name, None)
        except RuntimeError:
            continue
        if value is not None:
            return value
    return default


def _linear_state(text) -> tuple[int, int, int] | None:
    """Mamba-style layers keep a conv state (batch, channels, conv_kernel) and an SSM state (batch, channels,
    state_size); Mamba and Jamba name the numbers differently, None for any other naming."""
    if getattr(text, "mamba_d_state", None) is not None:  # Jamba
        channels = int(text.mamba_expand * text.hidden_size)
        return channels, int(text.mamba_d_conv), int(text.mamba_d_state)
    numbers = [getattr(text, name, None) for name in ("intermediate_size", "conv_kernel", "state_size")]
    if None not in numbers:  # Mamba (Mamba2 names its channels otherwise: None, like any other naming)
        return tuple(int(n) for n in numbers)
    return None
