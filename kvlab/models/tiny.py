"""Tiny random-weight models built from configs: no download, seconds to run, every cache structure.

Their text is noise; they exist to exercise cache *structure* (full, sliding, encoder-decoder, linear, hybrid)
in fast tests and in the notebook on model-specific caches. Weights are seeded, so runs are reproducible.
"""

from __future__ import annotations

import torch
import transformers

from kvlab.i18n import _

TINY_VOCAB = 128


def _configs() -> dict:
    ids = dict(pad_token_id=0, bos_token_id=1, eos_token_id=2)
    common = dict(vocab_size=TINY_VOCAB, hidden_size=64, intermediate_size=128, num_attention_heads=4, **ids)
    common |= dict(num_key_value_heads=2)  # Jamba's; the attention models' add their head size and positions
    attention = dict(head_dim=16, max_position_embeddings=512, **common)
    return {
        # llama-like: every layer full attention
        "tiny-llama": transformers.LlamaConfig(num_hidden_layers=3, **attention),
        # gemma3-like: sliding window 8, pattern 2 sliding : 1 full
        "tiny-gemma3": transformers.Gemma3TextConfig(
            num_hidden_layers=6,
            sliding_window=8,
            layer_types=["sliding_attention", "sliding_attention", "full_attention"] * 2,
            query_pre_attn_scalar=16,
            **attention,
        ),
        # encoder-decoder
        "tiny-bart": transformers.BartConfig(
            vocab_size=TINY_VOCAB,
            d_model=64,
            encoder_layers=2,
            decoder_layers=2,
            encoder_attention_heads=4,
            decoder_attention_heads=4,
            encoder_ffn_dim=128,
            decoder_ffn_dim=128,
            max_position_embeddings=256,
            **ids,
            decoder_start_token_id=2,
            forced_eos_token_id=None,
        ),
        # linear attention (state space)
        "tiny-mamba": transformers.MambaConfig(
            vocab_size=TINY_VOCAB, hidden_size=64, state_size=8, num_hidden_layers=3, **ids
        ),
        # hybrid: mamba layers with one attention layer
        "tiny-jamba": transformers.JambaConfig(
            num_hidden_layers=4,
            attn_layer_period=2,
            attn_layer_offset=1,
            expert_layer_period=4,
            expert_layer_offset=3,
            num_experts=2,
            mamba_d_state=8,
            mamba_expand=2,
            use_mamba_kernels=False,
            **common,
        ),
        # llama4-like: chunked attention (chunks of 8 tokens) in 3 layers of 4, the 4th full; dense MLPs, no experts
        "tiny-llama4": transformers.Llama4TextConfig(
            num_hidden_layers=4,
            attention_chunk_size=8,
            layer_types=["chunked_attention"] * 3 + ["full_attention"],
            intermediate_size_mlp=128,
            moe_layers=[],
            num_local_experts=2,
            **attention,
        ),
    }


TINY_MODELS = ("tiny-llama", "tiny-gemma3", "tiny-bart", "tiny-mamba", "tiny-jamba", "tiny-llama4")


def tiny_config(name: str):
    """The config of one of TINY_MODELS, or of any `model_type` of `causal_lm_types()` shrunk."""
    configs = _configs()
    if name in configs:
        return configs[name]
    if name in causal_lm_types():
        return shrunk_config(name)
    raise ValueError(
        _(
            "unknown tiny model {name!r}; valid: {valid}, or a model type of transformers with a causal-LM or seq2seq "
            "class (kvlab.models.tiny.causal_lm_types())"
        ).format(name=name, valid=", ".join(TINY_MODELS))
    )


def tiny_model(name: str, seed: int = 0, dtype: torch.dtype = torch.float32, device=None):
    """A seeded random-weight model in eval mode (built on the CPU, then moved to `device` when given)."""
    config = tiny_config(name)
    torch.manual_seed(seed)
    # a type with both classes (BART) generates as an encoder-decoder; Whisper's decoder alone as a causal LM
    seq2seq = config.is_encoder_decoder if name in TINY_MODELS else is_seq2seq_type(name)
    auto = transformers.AutoModelForSeq2SeqLM if seq2seq else transformers.AutoModelForCausalLM
    try:
        model = auto.from_config(config, dtype=dtype)
    except Exception:
        if name in TINY_MODELS:
            raise
        # some models need a layer kind twice (Zamba ties its shared blocks across hybrid layers)
        torch.manual_seed(seed)
        model = auto.from_config(shrunk_config(name, repeats=2), dtype=dtype)
    if device is not None:
        from kvlab.models import parse_device

        model.to(parse_device(device))  # the same weights on every device: they are drawn on the CPU
    return model.eval()


# -- any model type transformers has, built tiny: generic widths (a model's own rules derive the rest from them) ---
TINY_WIDTH = 64
TINY_HEADS = 4
TINY_HEAD_DIM = 16
TINY_INTERMEDIATE = 128
TINY_EXPERT_INTERMEDIATE = 32
TINY_EXPERTS = 4
TINY_WINDOW = 8  # sliding windows and attention chunks: a 12-token prompt already crosses them
MIN_LAYERS = 2
MAX_PATTERN_LAYERS = 12  # a longer period keeps only the first layer of each kind, in order
FIRST_SPECIAL_ID = TINY_VOCAB - 16  # special token ids past the vocabulary are renumbered from here up

_LAYER_COUNTS = """num_hidden_layers n_layer n_layers num_layers decoder_layers encoder_layers num_decoder_layers
    num_encoder_layers""".split()
_WIDTHS = ("hidden_size", "d_model", "n_embd", "n_embed", "model_dim", "emb_dim")
_HEADS = """num_attention_heads n_head n_heads num_heads attention_heads encoder_attention_heads decoder_attention_heads
    num_encoder_attention_heads num_decoder_attention_heads""".split()
_KV_HEADS = ("num_key_value_heads", "num_kv_heads", "kv_n_heads", "multi_query_group_num", "num_query_groups")
_HEAD_DIMS = ("head_dim", "d_kv", "kv_channels", "attention_head_size", "d_head", "dim_head")
_INTERMEDIATES = """intermediate_size ffn_dim n_inner d_ff dim_ff encoder_ffn_dim decoder_ffn_dim ffn_hidden_size
    intermediate_size_mlp dense_intermediate_size mlp_dim""".split()
_EXPERT_INTERMEDIATES = """moe_intermediate_size shared_expert_intermediate_size moe_shared_expert_intermediate_size
    expert_ffn_hidden_size expert_intermediate_size""".split()
_EXPERT_COUNTS = ("num_experts", "num_local_experts", "n_routed_experts", "moe_num_experts")
_EXPERTS_PER_TOKEN = ("num_experts_per_tok", "num_experts_per_token", "moe_top_k")
_ONE_IF_SET = """n_group num_expert_group topk_group n_shared_experts num_shared_experts moe_num_shared_experts
    first_k_dense_replace n_groups mamba_n_groups mamba_ngroups""".split()
_FIXED = {
    # multi-head latent attention (DeepSeek-V2/V3 style): the compressed latent and the rope key
    **dict(kv_lora_rank=32, q_lora_rank=32, qk_rope_head_dim=8, qk_nope_head_dim=16, v_head_dim=16),
    **dict(index_head_dim=16, index_n_heads=2, index_num_heads=2),
    # linear attention and state-space layers
    **dict(linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16, linear_value_head_dim=16),
    **dict(linear_head_dim=16, linear_num_heads=2, state_size=16, ssm_state_size=16, mamba_d_state=16),
    **dict(mamba_n_heads=8, mamba_num_heads=8, mamba_d_head=16, mamba_head_dim=16, mamba_headdim=16),
    **dict(mamba_expand=2, mamba_dt_rank=8, time_step_rank=8, mamba_d_ssm=128),
    # per-layer side inputs and low-rank adapters (Gemma 3n)
    **dict(hidden_size_per_layer_input=16, laurel_rank=8, vocab_size_per_layer_input=TINY_VOCAB),
    # periodic layer layouts (Jamba, Zamba): the first period holds every kind
    **dict(attn_layer_period=2, attn_layer_offset=1, expert_layer_period=2, expert_layer_offset=1),
    "use_mamba_kernels": False,
    "rotary_dim": 8,  # rotary part of a head (GPT-J, CodeGen): at most the tiny head
    "moe_k": 2,
}
# Per-layer lists named by layer index rather than one entry per layer
_INDEX_LISTS = ("layers", "idxs", "indexes", "indices", "ids")


def causal_lm_types() -> list[str]:
    """Every model type of the installed transformers with a causal-LM or a seq2seq class."""
    from transformers.models.auto import modeling_auto

    causal = modeling_auto.MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    seq2seq = modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES
    return sorted(set(causal) | set(seq2seq))


def is_seq2seq_type(model_type: str) -> bool:
    """Whether `model_type` generates through its seq2seq class (an encoder-decoder)."""
    from transformers.models.auto import modeling_auto

    return model_type in modeling_auto.MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES


def shrunk_config(model_type: str, repeats: int = 1):
    """transformers' default config of `model_type`, rebuilt tiny with the same structure (so that what the model's
    own rules derive follows): the widths above, and the fewest layers that keep `repeats` of each kind it mixes."""
    default = transformers.AutoConfig.for_model(model_type)
    overrides = _shrinking(default, {}, repeats)
    if "is_decoder" in default.to_dict() and not is_seq2seq_type(model_type):
        overrides["is_decoder"] = True  # an encoder type's causal-LM head (BERT's) attends causally and caches
    return type(default)(**overrides)


def _shrinking(config, renumbered: dict[int, int], repeats: int = 1) -> dict:
    """The keyword arguments that rebuild `config` tiny (sub-configs rebuilt tiny first, as objects)."""
    values = config.to_dict()
    overrides: dict = {}
    for key in getattr(config, "sub_configs", {}) or {}:
        sub = getattr(config, key, None)
        if isinstance(sub, transformers.PreTrainedConfig):
            overrides[key] = type(sub)(**_shrinking(sub, renumbered, repeats))
    overrides |= _shrunk_sizes(values)
    for key, value in values.items():  # a composite config names its text model's special tokens too
        if key.endswith(("_token_id", "_token_ids", "_token_index")) and value is not None:
            overrides[key] = _renumber(value, renumbered)
    overrides |= _shrunk_layers(values, overrides, repeats)
    return overrides


def _shrunk_sizes(values: dict) -> dict:
    """The widths, heads, MLPs, experts, windows and vocabulary of a config's values, shrunk."""
    overrides: dict = {}

    def set_present(keys, value_of) -> None:
        for key in keys:
            if isinstance(values.get(key), int) and not isinstance(values.get(key), bool):
                overrides[key] = value_of(values[key])

    heads = next((values[k] for k in _HEADS if isinstance(values.get(k), int)), None)
    set_present(_WIDTHS, lambda _: TINY_WIDTH)
    set_present(_HEADS, lambda _: TINY_HEADS)
    # multi-query (one KV head) stays multi-query; multi-head stays multi-head; grouped keeps 2 groups
    set_present(_KV_HEADS, lambda n: 1 if n == 1 else TINY_HEADS if n == heads else TINY_HEADS // 2)
    set_present(_HEAD_DIMS, lambda _: TINY_HEAD_DIM)
    set_present(_INTERMEDIATES, lambda _: TINY_INTERMEDIATE)
    set_present(_EXPERT_INTERMEDIATES, lambda _: TINY_EXPERT_INTERMEDIATE)
    set_present(_EXPERT_COUNTS, lambda n: min(n, TINY_EXPERTS))
    set_present(_EXPERTS_PER_TOKEN, lambda n: min(n, 2))
    set_present(_ONE_IF_SET, lambda n: min(n, 1))
    set_present(("sliding_window", "attention_chunk_size"), lambda n: min(n, TINY_WINDOW))
    overrides |= {k: v for k, v in _FIXED.items() if values.get(k) is not None and type(values[k]) is type(v)}
    if "qk_rope_head_dim" in values:  # MLA: the rope part is the attention's head_dim, the rest derived
        for key in ("head_dim", "qk_head_dim"):
            overrides.pop(key, None)
    if {"expand", "num_heads", "head_dim"} <= values.keys() and "state_size" in values:  # Mamba-2 heads
        overrides["num_heads"] = values["expand"] * TINY_WIDTH // TINY_HEAD_DIM
    if isinstance(values.get("vocab_size"), int):
        overrides["vocab_size"] = TINY_VOCAB
    if isinstance(values.get("axial_pos_embds_dim"), list):  # Reformer: the axial factors sum to the width
        overrides["axial_pos_embds_dim"] = [TINY_WIDTH // 2, TINY_WIDTH // 2]
    return overrides


def _renumber(value, renumbered: dict[int, int]):
    """A special token id (or list of them) past the tiny vocabulary moved into its top 16 ids, the same old id to
    the same new one in every sub-config."""
    if isinstance(value, list):
        return [_renumber(v, renumbered) for v in value]
    if not isinstance(value, int) or value < FIRST_SPECIAL_ID:
        return value
    if value not in renumbered:
        renumbered[value] = FIRST_SPECIAL_ID + len(renumbered) % (TINY_VOCAB - FIRST_SPECIAL_ID)
    return renumbered[value]


def _earlier_layers(values: list) -> bool:
    """A per-layer list of layer indices, each at most its own layer's, some another's."""
    indices = all(isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= i for i, v in enumerate(values))
    return indices and any(v != i for i, v in enumerate(values))


def _shrunk_layers(values: dict, overrides: dict, repeats: int = 1) -> dict:
    """Fewer layers, keeping the model's per-layer pattern: the per-layer lists (layer types, MLP types, ...) cut
    to their shortest prefix that has every combination they had `repeats` times, lists of layer indices kept
    below it, and a shorter repeating pattern (RecurrentGemma's block types) kept whole, once per repeat."""
    counts = {k: values[k] for k in _LAYER_COUNTS if isinstance(values.get(k), int) and values[k] > 0}
    if not counts:
        return {}
    n = max(counts.values())
    indexed = {
        k: v
        for k, v in values.items()
        if isinstance(v, list)
        and v
        and k.endswith(_INDEX_LISTS)
        and all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < n for i in v)
        and v == sorted(set(v))
    }
    per_layer = {
        k: v
        for k, v in values.items()
        if isinstance(v, list) and len(v) == n and k not in overrides and k not in indexed
    }
    cycle = max(
        (len(v) for k, v in values.items() if k.endswith("types") and isinstance(v, list) and 1 < len(v) < n), default=1
    )
    # per-layer lists of layer indices (Kolibri's `kv_source_layers`: the earlier layer whose K/V a layer reads): a
    # layer's kind is whether it reads its own, and the kept layers' entries are renumbered
    sources = {k for k, v in per_layer.items() if "layer" in k and _earlier_layers(v)}
    signature = [
        tuple(repr(v[i]) if k not in sources else v[i] == i for k, v in per_layer.items())
        + tuple(i in v for v in indexed.values())
        for i in range(n)
    ]
    kinds = set(signature)
    prefix = next(
        (p for p in range(1, n + 1) if all(signature[:p].count(k) >= min(repeats, signature.count(k)) for k in kinds)),
        n,
    )
    if values.get("num_kv_shared_layers"):  # Gemma 3n: the last layers reuse earlier ones' cache: one more period
        prefix = min(2 * prefix, n)
    if prefix <= MAX_PATTERN_LAYERS * repeats:
        keep = list(range(min(max(prefix, MIN_LAYERS, cycle * repeats), n)))
    else:  # the first layers of each kind, in order
        keep = sorted({i for kind in kinds for i in [j for j, s in enumerate(signature) if s == kind][:repeats]})
    new_index = {old: new for new, old in enumerate(keep)}
    shrunk = {k: min(count, len(keep)) if count != n else len(keep) for k, count in counts.items()}
    shrunk |= {k: [TINY_INTERMEDIATE if k in _INTERMEDIATES else v[i] for i in keep] for k, v in per_layer.items()}
    shrunk |= {k: [new_index[i] for i in v if i in new_index] for k, v in indexed.items()}
    # a source not kept: the layer reads its own
    shrunk |= {k: [new_index.get(per_layer[k][i], new) for new, i in enumerate(keep)] for k in sources}
    if values.get("num_kv_shared_layers"):
        shrunk["num_kv_shared_layers"] = len(keep) // 2
    return shrunk
