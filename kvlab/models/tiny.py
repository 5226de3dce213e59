"""Tiny random-weight models built from configs: no download, seconds to run, every cache structure.

Their text is noise; they exist to exercise cache *structure* (full, sliding, encoder-decoder, linear, hybrid)
in fast tests and in the notebook on model-specific caches. Weights are seeded, so runs are reproducible.
"""

from __future__ import annotations

import torch
import transformers

TINY_VOCAB = 128


def _configs() -> dict:
    common = dict(
        vocab_size=TINY_VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=16,
        max_position_embeddings=512,
        pad_token_id=0,
        bos_token_id=1,
        eos_token_id=2,
    )
    return {
        # llama-like: every layer full attention
        "tiny-llama": transformers.LlamaConfig(num_hidden_layers=3, **common),
        # gemma3-like: sliding window 8, pattern 2 sliding : 1 full
        "tiny-gemma3": transformers.Gemma3TextConfig(
            num_hidden_layers=6,
            sliding_window=8,
            layer_types=["sliding_attention", "sliding_attention", "full_attention"] * 2,
            query_pre_attn_scalar=16,
            **common,
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
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
            decoder_start_token_id=2,
            forced_eos_token_id=None,
        ),
        # linear attention (state space)
        "tiny-mamba": transformers.MambaConfig(
            vocab_size=TINY_VOCAB,
            hidden_size=64,
            state_size=8,
            num_hidden_layers=3,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
        ),
        # hybrid: mamba layers with one attention layer
        "tiny-jamba": transformers.JambaConfig(
            vocab_size=TINY_VOCAB,
            hidden_size=64,
            intermediate_size=128,
            num_hidden_layers=4,
            num_attention_heads=4,
            num_key_value_heads=2,
            attn_layer_period=2,
            attn_layer_offset=1,
            expert_layer_period=4,
            expert_layer_offset=3,
            num_experts=2,
            mamba_d_state=8,
            mamba_expand=2,
            use_mamba_kernels=False,
            pad_token_id=0,
            bos_token_id=1,
            eos_token_id=2,
        ),
        # llama4-like: chunked attention (chunks of 8 tokens) in 3 layers of 4, the 4th full; dense MLPs, no experts
        "tiny-llama4": transformers.Llama4TextConfig(
            num_hidden_layers=4,
            attention_chunk_size=8,
            layer_types=["chunked_attention"] * 3 + ["full_attention"],
            intermediate_size_mlp=128,
            moe_layers=[],
            num_local_experts=2,
            **common,
        ),
    }


TINY_MODELS = ("tiny-llama", "tiny-gemma3", "tiny-bart", "tiny-mamba", "tiny-jamba", "tiny-llama4")


def tiny_config(name: str):
    configs = _configs()
    if name not in configs:
        raise ValueError(f"unknown tiny model {name!r}; valid: {', '.join(TINY_MODELS)}")
    return configs[name]


def tiny_model(name: str, seed: int = 0, dtype: torch.dtype = torch.float32, device=None):
    """A seeded random-weight model in eval mode (built on the CPU, then moved to `device` when given)."""
    config = tiny_config(name)
    torch.manual_seed(seed)
    if config.is_encoder_decoder:
        model = transformers.AutoModelForSeq2SeqLM.from_config(config, dtype=dtype)
    else:
        model = transformers.AutoModelForCausalLM.from_config(config, dtype=dtype)
    if device is not None:
        from kvlab.models import parse_device

        model.to(parse_device(device))  # the same weights on every device: they are drawn on the CPU
    return model.eval()
