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
# # 02 · StaticCache: allocate once, mask the rest, compile
#
# **Learning goal.** Know what a StaticCache allocates and when; measure the slots it holds but masks; quantify
# the cost of sizing one cache for the longest request; and know what `torch.compile` gains from the fixed shape
# and when it compiles again.
#
# **In kvlab's words.** A `StaticCache` allocates every layer at `max_cache_len` tokens before the first token
# arrives and writes each new token into the next free slot. The tensors never change shape, so a compiled
# graph can be reused at every step; the price is that the empty slots exist from the start. Attention must
# skip them, so they are *masked*: allocated memory that holds nothing yet. kvlab counts, per step, the slots
# allocated, live and masked.

# %%
# %matplotlib inline
import os

import torch
import transformers

import kvlab
from kvlab.measure import compiled, formula, text
from kvlab.plots import growth, slots

torch.manual_seed(0)
transformers.logging.disable_progress_bar()
model, tokenizer = kvlab.load("smollm2")
prompt = text.prompt_ids(tokenizer, 40)  # (1, 40)

# %% [markdown]
# ## 1. Pre-allocation
#
# **Predict first.** SmolLM2, a 40-token prompt, 16 new tokens, `max_cache_len=128`. How many bytes does the
# StaticCache hold after the prefill, and after the last step? And a DynamicCache?

# %%
static = kvlab.run(model, tokenizer, prompt, cache="static", max_cache_len=128, max_new_tokens=16)
dynamic = kvlab.run(model, tokenizer, prompt, cache="dynamic", max_new_tokens=16)

# %%
# NBVAL_CHECK_OUTPUT
for name, run in {"static": static, "dynamic": dynamic}.items():
    by_step, summary = run.trace.bytes_by_step(), run.trace.summary()
    print(f"{name:>8}: {by_step[0]:>10,} bytes after the prefill, {by_step[-1]:>10,} at the end; "
          f"slots allocated {summary['slots_allocated']:,}, live {summary['slots_live']:,}, "
          f"masked {summary['slots_masked']:,} ({summary['waste_pct']} %)")
print("same tokens:", static.generated_token_ids == dynamic.generated_token_ids)

# %% [markdown]
# The StaticCache holds 30 layers × 128 slots × 1,536 bytes = 5,898,240 bytes from the prefill on; the
# DynamicCache holds only what it has seen (55 tokens × 46,080 bytes at the end). Same tokens: the masked slots
# are never attended.

# %%
slots.plot_slots(static.trace, title="StaticCache(max_cache_len=128): allocated vs live vs masked per step")

# %%
growth.plot_growth({"StaticCache(128)": static.trace, "DynamicCache": dynamic.trace}, by_kind=False,
                   title="Bytes against tokens: flat at the allocation vs growing with the sequence")

# %% [markdown]
# ## 2. One long request, then short ones
#
# transformers' cache guide warns about this case: a StaticCache is sized once, for the longest sequence it must
# hold, and every later, shorter sequence pays for that size. A server that must accept a 200-token prompt with
# 16 new tokens needs `max_cache_len` ≥ 216; say 256.
#
# **Predict first.** With that cache, what share of the allocated slots is masked at the end of a 20-token
# request (8 new tokens)? A 60-token one?

# %%
requests = {"200-token prompt": 200, "60-token prompt": 60, "20-token prompt": 20}
runs = {label: kvlab.run(model, tokenizer, text.prompt_ids(tokenizer, n), cache="static", max_cache_len=256,
                         max_new_tokens=8).trace for label, n in requests.items()}

# %%
# NBVAL_CHECK_OUTPUT
for row in slots.run_slots(runs):
    dynamic_bytes = formula.kv_bytes(model.config, row["live"] // 30)  # live slots of 30 layers → tokens
    print(f"{row['run']:>17}: {row['bytes']:>10,} bytes allocated, {row['masked']:>5,} of {row['allocated']:,} slots "
          f"masked ({row['waste_pct']:5.1f} %); a DynamicCache would hold {dynamic_bytes:>9,} bytes")

# %%
slots.plot_runs(runs, title="One StaticCache size (256) for every request: live vs masked slots")

# %% [markdown]
# The short requests pay for the long one: 89.5 % of the 20-token request's cache is masked. Two ways out: a
# DynamicCache (no waste, but changing shapes, so no reusable compiled graph), or a few StaticCaches of
# different sizes (length buckets), each request going to the smallest that fits.
#
# ## 3. `torch.compile`: compile time, steady speed, and recompiling
#
# The fixed shape is what makes a StaticCache compile-friendly: transformers compiles the *decoding* forward once
# and replays it at every step. The prefill stays eager.
#
# **Predict first.** After compiling for a 40-token prompt, does a 60-token prompt compile again? Does a
# different `max_cache_len`?
#
# Compiling with inductor takes tens of seconds on a CPU (for SmolLM2 on this shared machine: 92 s the first
# time, 10 s once inductor's on-disk cache held the kernels), too long for the test suite, so this section runs
# only when `KVLAB_COMPILE=1` is set. Its numbers are timings and are not checked; the output below is from a
# run with the cache warm.

# %%
if os.environ.get("KVLAB_COMPILE") == "1":
    report = compiled.compile_report(model, [prompt, text.prompt_ids(tokenizer, 60)], new_tokens=16, max_cache_len=128)
    print(f"eager: {report['eager_seconds']:.2f} s; first compiled run: {report['first_compiled_seconds']:.2f} s "
          f"(compiling ≈ {report['first_compiled_seconds'] - report['steady_seconds']:.1f} s); "
          f"steady compiled: {report['steady_seconds']:.2f} s "
          f"({100 * (report['eager_seconds'] / report['steady_seconds'] - 1):+.0f} % speed)")
    for run in report["runs"]:
        print(f"  {run['run']:>22}: {run['new_graphs']} new graph(s) compiled, {run['seconds']:.2f} s")
    print("same tokens as eager:", report["same_tokens"])
else:
    print("skipped: set KVLAB_COMPILE=1 to compile (tens of seconds on a CPU)")

# %% [markdown]
# What to look for: the first compiled run pays the compilation; the same prompt again reuses the graph; a new
# prompt length compiles **nothing** (the prefill is eager and the decode graph sees the same shapes); a new
# `max_cache_len` changes the cache tensors' shape and compiles again. The steady gain on this CPU was about a
# quarter (16 tokens, eager prefill included; a timing on a shared machine, so take the size, not the digits).
# On a GPU, where launching many small kernels dominates decoding, compiled decoding with CUDA graphs can gain
# more.
#
# ## Takeaway
#
# - A StaticCache holds `max_cache_len` slots in every layer from the start; the unused ones are masked.
# - Sized for the longest request, it wastes most of its memory on short ones; bucket by length or use a
#   DynamicCache when lengths vary and compile is not needed.
# - The fixed shape lets `torch.compile` reuse one decoding graph; only a new cache shape compiles again.
#
# **Next:** [03 · Offloading](03_offloading.ipynb): keep the cache in CPU memory and bring one layer at a time.
