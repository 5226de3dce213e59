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
# # 04 · Quantized caches: fewer bits per token, and what it costs
#
# **Learning goal.** Know how a `QuantizedCache` splits its memory between packed low-bit data and a
# full-precision residual, predict when the compression actually shows, measure what each backend and bit width
# does to the model's predictions, and know why Gemma 3 is refused.
#
# **In kvlab's words.** transformers' `QuantizedCache` follows KIVI: the newest `residual_length` tokens (128 by
# default) stay in full precision, and everything older is packed to `nbits` per number in groups of
# `q_group_size` with a scale and offset per group. When the residual is full, it is quantized and appended to
# the packed part (a *flush*). Backends: **hqq** (1, 2, 3, 4 or 8 bits), **quanto** (2 or 4 bits) and **fp8**
# (every token cast to 8-bit floats at once, no residual). The prefill attends to the full-precision keys; the
# quantized copy is what every *later* step reads.
#
# **How quality is measured here.** We feed 154 tokens of real English (Python's reference manual, shipped with
# Python) through each cache: a 106-token prefill, then one token per forward, scoring the 48 next-token
# predictions against a DynamicCache fed the same tokens (teacher forcing). *Top-1 agreement*: how often the
# greedy choice is the same. *KL*: how far the next-token distribution moved (nats). *Perplexity*: how well the
# model still predicts the real text.

# %%
# %matplotlib inline
import sys
import warnings

import torch
import transformers

import kvlab
from kvlab.measure import quality, text
from kvlab.plots import quantized

warnings.filterwarnings("ignore", message=".*falling back to its reference PyTorch implementation.*")
torch.manual_seed(0)
transformers.logging.disable_progress_bar()
model, tokenizer = kvlab.load("smollm2")
ids = text.prompt_ids(tokenizer, 154)  # (1, 154): prefill 106, then 48 scored one-token steps
print(f"Python {sys.version.split()[0]} (the text comes from its pydoc_data)")

# %% [markdown]
# ## 1. Where the bytes go
#
# **Predict first.** After the 106-token prefill and 47 decode steps, the cache holds 153 tokens. With 4-bit
# quanto and the default `residual_length=128`, which part is bigger: the 106 packed tokens or the 47 tokens of
# full-precision residual? And what does fp8 (no residual) hold?

# %%
CONFIGS = {
    "hqq 1-bit": {"backend": "hqq", "nbits": 1},
    "hqq 2-bit": {"backend": "hqq", "nbits": 2},
    "hqq 3-bit": {"backend": "hqq", "nbits": 3},
    "hqq 4-bit": {"backend": "hqq", "nbits": 4},
    "hqq 8-bit": {"backend": "hqq", "nbits": 8},
    "quanto 2-bit": {"backend": "quanto", "nbits": 2},
    "quanto 4-bit": {"backend": "quanto", "nbits": 4},
    "fp8": {"backend": "fp8"},
    "quanto 4-bit, residual 16": {"backend": "quanto", "nbits": 4, "residual_length": 16},
}
rows, runs = quality.sweep(model, ids, prefill_tokens=106, configs=CONFIGS)

# %%
# NBVAL_CHECK_OUTPUT
print(f"{'config':>26} {'packed':>10} {'residual':>10} {'total':>10} {'vs 16-bit':>9} {'packed vs 16-bit':>17}")
for r in rows:
    print(f"{r['config']:>26} {r['packed_bytes']:>10,} {r['residual_bytes']:>10,} {r['cache_bytes']:>10,} "
          f"{r['memory_ratio_16bit']:>9.2f} {r['packed_ratio_16bit']:>17.3f}")

# %%
quantized.plot_configs({r["config"]: runs[r["config"]].trace for r in rows[1:]}, reference_bytes=rows[0]["cache_bytes"],
                       title="SmolLM2 at 153 tokens: packed vs full-precision residual bytes")

# %% [markdown]
# At 153 tokens the residual dominates: with 4-bit quanto it is 2,165,760 of 2,928,960 bytes (47 tokens ×
# 46,080 bytes in float32), so the "4-bit" cache is 83 % the size of a 16-bit one and 42 % of the float32
# DynamicCache. The packed part alone is what the bit width promises (last column; scales and offsets add to the
# nominal bits/16), and it is what a sequence much longer than the residual approaches. fp8 has no residual:
# exactly half a 16-bit cache, from the first token.
#
# **Predict first.** With `residual_length=16`, the residual flushes every 16 tokens. Draw the packed and residual
# bytes against tokens in your head: a ramp, or a saw?

# %%
quantized.plot_split(runs["quanto 4-bit, residual 16"].trace, title="quanto 4-bit, residual_length=16")

# %%
# NBVAL_CHECK_OUTPUT
for label in ("quanto 4-bit", "quanto 4-bit, residual 16"):
    r = next(r for r in rows if r["config"] == label)
    print(f"{label:>26}: {r['flushes']:>2} flushes (layer-level), {r['cache_bytes']:,} bytes at 153 tokens")

# %% [markdown]
# A saw: the residual fills one token per step and empties into the packed part at each flush. A short residual
# makes the cache smaller at short lengths, but more tokens are read back from their quantized copy, and each
# flush re-quantizes on the critical path.
#
# ## 2. What quantization does to the predictions
#
# **Predict first.** Rank hqq 1, 2, 4 and 8 bits, quanto 2 and 4 bits and fp8 by how often the greedy next token
# still matches the unquantized cache over 48 positions. Where does it fall off a cliff?

# %%
# NBVAL_CHECK_OUTPUT
positions = len(runs["dynamic"].targets)
for r in rows:
    print(f"{r['config']:>26}: top-1 agreement {round(r['top1_agreement'] * positions):>2}/{positions}")

# %%
# KL, perplexity and speed (not checked: floating-point sums, and timings depend on the machine and its load).
print(f"{'config':>26} {'KL mean':>8} {'KL max':>7} {'perplexity':>11} {'ms/token':>9}")
for r in rows:
    print(f"{r['config']:>26} {r['kl_mean']:>8.4f} {r['kl_max']:>7.3f} {r['perplexity']:>11.2f} "
          f"{r['ms_per_token']:>9.1f}")

# %% [markdown]
# 8-bit (hqq and fp8) is nearly indistinguishable from the DynamicCache; 4-bit moves the distribution a little
# (quanto a little less than hqq on this text) and keeps most greedy choices; 3-bit loses more than a third; 2-bit
# and below break the model on this text, with perplexity multiplied many times. Every decode step dequantizes
# the packed part back to float before attention, so the work per token grows with the packed length; at 153
# tokens that work is small next to the model itself, and on a shared CPU the per-token times above are too
# noisy to rank the backends. The win of a quantized cache is memory, on long sequences.
#
# ## 3. The memory–quality frontier, next to published results
#
# kvlab's points (filled) use the packed part's size relative to 16-bit, the ratio a long sequence approaches,
# and top-1 agreement on this text. The hollow diamonds are **external references**, not measured here, on other
# models and benchmarks: Hugging Face's KV-cache quantization blog (quanto int4 ≈ fp16 on LongBench, int2
# degrades) and KIVI (2-bit with almost the same quality and 2.6× less peak memory, model weights included).

# %%
points = [{"label": r["config"], "memory_ratio": r["packed_ratio_16bit"], "quality": r["top1_agreement"]}
          for r in rows if r["config"] not in ("dynamic", "quanto 4-bit, residual 16")]  # dynamic: 1.0 by definition
quantized.plot_frontier(points, quality_label="top-1 agreement with DynamicCache (1.0 = same)",
                        memory_label="packed bytes relative to 16-bit (the long-sequence limit)")

# %% [markdown]
# The shapes agree: 4-bit and above hold, 2-bit is where quality goes. That KIVI keeps quality at 2 bits and this
# run does not is no contradiction: KIVI quantizes keys per channel and values per token with a residual of recent
# tokens, on 7B-class models; a 135M model with 3 KV heads has far less redundancy to lose.
#
# ## 4. Why Gemma 3 is refused
#
# **Predict first.** Gemma 3's sliding layers drop tokens older than the window. What would a quantized layer
# have to do that the QuantizedCache does not?

# %% tags=["raises-exception"]
gemma_config = transformers.AutoConfig.from_pretrained(kvlab.BUNDLED["gemma3"].directory)
kvlab.make_cache("quantized", gemma_config, backend="quanto", nbits=4)

# %% [markdown]
# transformers' `QuantizedCache` builds only full-attention quantized layers: it has no layer that evicts, so a
# sliding model would keep (and attend to) tokens outside its window. kvlab refuses before allocating anything.
#
# ## Takeaway
#
# - A quantized cache is packed data plus a full-precision residual; below a few hundred tokens the residual
#   dominates and the compression hardly shows. fp8 halves a 16-bit cache from the first token.
# - On SmolLM2, 8-bit is free, 4-bit costs a little, 2-bit and below break the predictions.
# - Quantized caches trade compute (dequantization every step) for memory; they pay off on long sequences.
#
# **Next:** [05 · Encoder-decoder and model-specific caches](05_encoder_decoder_and_model_specific.ipynb).
