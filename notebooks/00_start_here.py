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
# # 00 · Start here: what a KV cache stores, and why it exists
#
# **Learning goal.** After this notebook you can say what a KV cache holds (two tensors per attention layer),
# compute its size from a model's config, and explain why generating without one gets slower with every token.
#
# **In kvlab's words.** A decoder predicts token *t* by letting it attend to tokens *1…t−1*. Each attention
# layer turns every token into a *key* (what it offers to be found by) and a *value* (what it hands over once
# found). Those never change once computed, so a cache keeps them: per layer, keys and values of shape
# `(batch, kv_heads, tokens, head_dim)`. With the cache, a step runs **one** new token through the model and
# reads the stored keys and values; without it, every step re-runs the model over the **whole** sequence.
#
# Everything below runs SmolLM2-135M-Instruct (30 layers, 3 KV heads × 64) on the CPU, greedy decoding, on
# real English text: the prose of Python's own reference manual (`pydoc_data`, shipped with Python).

# %%
# %matplotlib inline
import os
import sys

import torch
import transformers

import kvlab
from kvlab.measure import formula, latency, text
from kvlab.plots import growth
from kvlab.plots import latency as latency_plots

QUICK = os.environ.get("KVLAB_QUICK") == "1"  # shrinks the timed runs for CI; checked outputs hold either way
NEW_TOKENS = 16 if QUICK else 64
torch.manual_seed(0)
transformers.logging.disable_progress_bar()
model, tokenizer = kvlab.load("smollm2")
prompt = text.prompt_ids(tokenizer, 16)  # (1, 16): the first 16 tokens of the reference text
print(f"Python {sys.version.split()[0]}, prompt of {prompt.shape[-1]} tokens")

# %% [markdown]
# ## 1. Time per new token, with and without a cache
#
# **Predict first.** Without a cache, the model re-reads the whole sequence for each new token. With one, it
# reads one token plus the stored keys and values. As the sequence grows from 16 to 80 tokens, how does the
# time *per new token* change in each case? And the *total* time: which one grows like the square of the length?

# %%
without_cache = latency.time_per_token(model, prompt, NEW_TOKENS, use_cache=False)
with_cache = latency.time_per_token(model, prompt, NEW_TOKENS, use_cache=True)

# %%
# NBVAL_CHECK_OUTPUT
# Same model, same greedy decoding: the cache changes the cost, never the tokens.
print("identical tokens:", with_cache.token_ids == without_cache.token_ids)
print("first new tokens:", repr(tokenizer.decode(with_cache.token_ids[:12])))

# %%
latency_plots.plot_token_times({"no cache (use_cache=False)": without_cache, "DynamicCache": with_cache},
                               title=f"SmolLM2, {NEW_TOKENS} new tokens after a 16-token prompt")

# %%
# Timings (not checked: they depend on the machine and its load).
for name, run in {"no cache": without_cache, "DynamicCache": with_cache}.items():
    print(f"{name:>12}: {run.total_seconds:5.2f} s for {len(run.seconds)} tokens, "
          f"{run.seconds[-1] * 1e3:5.0f} ms for the last one")
print(f"speed-up: {without_cache.total_seconds / with_cache.total_seconds:.1f}x")

# %% [markdown]
# Without a cache, each step is a full forward over 16, 17, … tokens, so its time climbs with the position and
# the total climbs with its square. With the cache the step cost is nearly flat: the attention over stored keys
# does grow with length, but at these sizes it is small next to the per-token work of the 30 layers. (On a
# shared CPU the points are noisy; the slope is what to look at.)
#
# ## 2. How many bytes does each token cost?
#
# **Predict first.** Each token adds, in every one of the 30 layers, a key and a value of 3 heads × 64 numbers,
# stored as float32 (4 bytes). How many bytes per token is that, and how many after a 128-token prompt and
# 32 new tokens?

# %%
# NBVAL_CHECK_OUTPUT
per_token = formula.kv_bytes_per_token(model.config, torch.float32)
print(f"2 (K and V) × 30 layers × 3 kv heads × 64 head_dim × 4 bytes = {per_token:,} bytes per token")

# %%
# NBVAL_CHECK_OUTPUT
result = kvlab.run(model, tokenizer, text.prompt_ids(tokenizer, 128), cache="dynamic", max_new_tokens=32)
layer0 = result.cache_object.layers[0]
tokens = result.trace.final_layers()[0]["logical_length"]
print("layer 0 keys:", tuple(layer0.keys.shape), layer0.keys.dtype, "  (batch, kv_heads, tokens, head_dim)")
print(f"tokens in the cache: {tokens}  (the last generated token is never fed back)")
measured, expected = result.trace.summary()["final_bytes"], formula.kv_bytes(model.config, tokens)
print(f"measured: {measured:,} bytes;  formula: {expected:,} bytes")

# %% [markdown]
# Measured and formula agree to the byte: a DynamicCache of full-attention layers holds exactly the keys and
# values of every token it has seen, nothing more. kvlab measures *allocations* (each tensor storage once), so
# when the two differ in later notebooks (sliding windows, static pre-allocation, quantization) the difference
# is real memory, not bookkeeping.

# %%
growth.plot_growth(result.trace, formula_bytes_per_token=per_token,
                   title="SmolLM2 DynamicCache: measured bytes against the formula")

# %% [markdown]
# ## Takeaway
#
# - A KV cache stores, for each attention layer, the keys and values of every token so far:
#   `2 × layers × kv_heads × head_dim × bytes` per token (46,080 B for SmolLM2 in float32, ≈ 45 KiB).
# - It trades that memory for time: a step processes one token instead of the whole sequence, so time per token
#   stays nearly flat instead of growing with the position.
# - It never changes the tokens a greedy decode produces.
#
# **Next:** [01 · DynamicCache](01_dynamic_cache.ipynb): how the cache grows layer by layer, and what happens
# on Gemma 3, whose sliding-window layers stop growing at 512 tokens.
