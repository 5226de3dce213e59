# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 05 · Encoder-decoder and model-specific caches
#
# **Learning goal.** Tell apart the three shapes a cache can take: an encoder-decoder's cross-attention cache,
# fixed at the source length; a decoder's self-attention cache, growing per token; and a state-space (Mamba)
# layer's state, constant whatever the length. Recognise them mixed in one hybrid model (Jamba).
#
# **In kvlab's words.** An encoder-decoder (BART, T5, Whisper) runs its encoder once over the source. Every
# decoder layer attends twice: to the decoder's own tokens (*self-attention*, which grows like any KV cache) and
# to the encoder's output (*cross-attention*, whose keys and values are computed once and never change).
# transformers' `EncoderDecoderCache` holds one cache for each. A Mamba layer is different in kind: it folds the
# whole past into a fixed-size state (a short convolution window and a recurrent state) that it overwrites every
# step, so there is nothing per token to keep.
#
# **The models here have random weights** (`kvlab.tiny_model`, seeded, a vocabulary of 128): their text is noise.
# They have the real architectures of BART, Llama, Mamba and Jamba at toy sizes, and the cache *structure*, not
# the text, is the lesson. `min_new_tokens` keeps them from stopping early on a random end-of-sequence token.

# %%
# %matplotlib inline
import torch
import transformers

import kvlab
from kvlab.plots import growth

torch.manual_seed(0)
transformers.logging.set_verbosity_error()  # the tiny Mamba layers say they use the reference kernels


def random_prompt(n: int, seed: int = 0) -> torch.Tensor:
    """(1, n) token ids: the tiny models' input is noise anyway."""
    return torch.randint(3, 128, (1, n), generator=torch.Generator().manual_seed(seed))


def generate(name: str, source_tokens: int, new_tokens: int):
    model = kvlab.tiny_model(name)
    return kvlab.run(model, None, random_prompt(source_tokens), "dynamic", max_new_tokens=new_tokens,
                     generate_kwargs={"min_new_tokens": new_tokens})


# %% [markdown]
# ## 1. EncoderDecoderCache: self-attention grows, cross-attention is fixed
#
# tiny-bart: 2 decoder layers, 4 heads × 16. We translate a 12-token source into 10 tokens, then a 24-token
# source into 10 tokens.
#
# **Predict first.** For each run, how many tokens does each decoder layer's self-attention cache hold at the end,
# and its cross-attention cache? Which of the two doubles with the longer source?

# %%
# NBVAL_CHECK_OUTPUT
for source in (12, 24):
    trace = generate("tiny-bart", source, 10).trace
    print(f"source of {source} tokens:")
    for row in trace.layer_table():
        print(f"  {row['role']:>5} layer {row['layer_idx']}: {row['logical_length']:>2} tokens, "
              f"{row['bytes_held']:>6,} bytes")

# %%
bart = generate("tiny-bart", 24, 24)
growth.plot_growth(bart.trace, title="tiny-bart (random weights): self- vs cross-attention bytes per decoder token")

# %% [markdown]
# The self-attention part starts with one token (the decoder's start token) and grows by one per step; the
# cross-attention part is filled once, on the first decoder step, with the encoder's keys and values for all 24
# source tokens, and then never changes. For a long source (a 30-second Whisper clip is 1,500 encoder frames)
# the cross-attention part can be most of the cache, and it is the same size at the first token as at the last.
#
# ## 2. Mamba: a state that does not grow
#
# **Predict first.** Generate 64 tokens with tiny-llama (3 attention layers) and tiny-mamba (3 Mamba layers).
# Sketch bytes against tokens for both.

# %%
runs = {name: generate(name, 8, 64) for name in ("tiny-llama", "tiny-mamba", "tiny-jamba")}

# %%
# NBVAL_CHECK_OUTPUT
for name, result in runs.items():
    by_step = result.trace.bytes_by_step()
    kinds = sorted({row["kind"] for row in result.trace.layer_table()})
    print(f"{name:>10} ({', '.join(kinds)} layers): {by_step[0]:>6,} bytes after the prompt, {by_step[-1]:>6,} after "
          f"{len(by_step) - 1} more tokens, +{(by_step[-1] - by_step[0]) // (len(by_step) - 1):,} per token")

# %%
growth.plot_growth({name: r.trace for name, r in runs.items()}, by_kind=False,
                   title="Random-weight tiny models: KV cache vs Mamba state vs hybrid")

# %% [markdown]
# tiny-llama grows by 768 bytes per token (3 layers × K and V × 2 heads × 16 × 4 bytes), forever. tiny-mamba's
# state is the same size after 8 tokens as after 71: each layer keeps a convolution window of the last few
# inputs and a recurrent state of fixed size, updated in place. (The tiny Mamba's state happens to be bigger
# than a few tokens of the tiny Llama's KV cache; at real sizes and long contexts, the constant wins.)
#
# ## 3. A hybrid: Jamba
#
# tiny-jamba alternates Mamba and attention layers. **Predict first.** Which of its layers grow?

# %%
# NBVAL_CHECK_OUTPUT
for row in runs["tiny-jamba"].trace.layer_table():
    print(f"layer {row['layer_idx']} {row['kind']:>6}: {row['logical_length']:>2} tokens, "
          f"{row['bytes_held']:>6,} bytes")
print({kind: points[-1][1] for kind, points in growth.bytes_by_kind(runs["tiny-jamba"].trace).items()})

# %%
growth.plot_growth(runs["tiny-jamba"].trace, title="tiny-jamba (random weights): linear state vs attention KV")

# %% [markdown]
# Only the attention layers grow; the Mamba layers' state stays flat. A hybrid's memory slope is set by its
# attention layers alone, which is why long-context hybrids keep few of them.
#
# ## Takeaway
#
# - `EncoderDecoderCache` = a self-attention cache that grows per generated token + a cross-attention cache fixed
#   at the source length, filled once.
# - Mamba/linear-attention layers keep a constant-size state; a KV cache grows linearly. Hybrids grow only in
#   their attention layers.
# - kvlab's instrumented caches record all three shapes in the same trace format.
#
# **Next:** [06 · Iterative chat](06_iterative_chat.ipynb): reuse one cache across the turns of a conversation.
