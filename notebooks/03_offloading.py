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
# # 03 · Offloading: keep the cache on the CPU, one layer on the accelerator at a time
#
# **Learning goal.** Know what `offloaded` and `offloaded_static` caches keep on the accelerator (about two
# layers' worth), read their prefetch/offload schedule, choose `offload_only_non_sliding` on a sliding-window
# model, and use the cache guide's `resilient_generate` to fall back to offloading when memory runs out.
#
# **In kvlab's words.** An offloaded cache stores every layer in CPU memory. While layer *i* computes, it copies
# layer *i+1* to the accelerator (a *prefetch*, on a side stream so it overlaps compute) and, once layer *i* is
# done, moves it back (an *offload*). The accelerator then holds about two layers instead of all of them; the
# price is two copies per layer per step over the bus. `offloaded_static` does the same with StaticCache's
# fixed-size layers.
#
# **On this machine there is no accelerator**, so the copies are CPU-to-CPU no-ops. kvlab runs transformers'
# exact schedule anyway and records it, and computes the bytes that *would* be resident on the device: every
# layer for an ordinary cache; for an offloaded one, only the layers between their prefetch and their offload.

# %%
# %matplotlib inline
import torch
import transformers

import kvlab
from kvlab.measure import resilient, text
from kvlab.plots import timeline

torch.manual_seed(0)
transformers.logging.disable_progress_bar()
smollm2, smollm2_tokenizer = kvlab.load("smollm2")
gemma, gemma_tokenizer = kvlab.load("gemma3")
prompt = text.prompt_ids(smollm2_tokenizer, 48)  # (1, 48)

# %% [markdown]
# ## 1. `offloaded` vs `offloaded_static` vs the plain DynamicCache
#
# **Predict first.** SmolLM2 has 30 layers. With a 48-token prompt and 12 new tokens, what fraction of the cache
# sits on the device at the peak for each kind? Do the generated tokens change?

# %%
runs = {
    "dynamic": resilient.device_peak(smollm2, prompt, "dynamic", max_new_tokens=12),
    "offloaded": resilient.device_peak(smollm2, prompt, "offloaded", max_new_tokens=12),
    "offloaded_static": resilient.device_peak(smollm2, prompt, "offloaded_static", max_new_tokens=12, max_cache_len=64),
}

# %%
# NBVAL_CHECK_OUTPUT
print(f"{'kind':>17} {'device peak':>12} {'cache peak':>11} {'moves':>6} {'bytes moved':>12}  same tokens")
for kind, r in runs.items():
    print(f"{kind:>17} {r['peak_device_bytes']:>12,} {r['peak_cache_bytes']:>11,} {r['transfers']:>6} "
          f"{r['transfer_bytes']:>12,}  {r['token_ids'] == runs['dynamic']['token_ids']}")

# %% [markdown]
# The offloaded cache peaks on the device at exactly two layers' worth (the one computing and the one being
# prefetched): 2/30 of the DynamicCache. `offloaded_static` holds two *pre-allocated* layers (64 slots each), so
# its device peak is two full-size layers whatever the sequence length, and every move copies the whole
# allocation, empty slots included. The tokens are identical: offloading moves data, it never changes it.
# The bill is the traffic: each decode step moves every layer twice (30 offloads at the prefill, then 60 moves
# per decode step).
#
# ## 2. The schedule, drawn
#
# **Predict first.** In one decode step, in what order do the 30 prefetches, updates and offloads happen? Which
# layer is prefetched while the last layer computes?

# %%
timeline.plot_timeline(runs["offloaded"]["trace"], steps=(1, 2),
                       title="SmolLM2, offloaded: two decode steps")

# %%
# NBVAL_CHECK_OUTPUT
names = [f"{e['direction'] if e['type'] == 'transfer' else 'update'} {e['layer_idx']}"
         for e in timeline.schedule(runs["offloaded"]["trace"], steps=(1, 1))]
print(" → ".join(names[:7]), "…")
print("…", " → ".join(names[-4:]))

# %% [markdown]
# Each layer is prefetched while the previous one computes, updated, then offloaded; the last layer prefetches
# layer 0 for the next step, so the schedule wraps around.
#
# ## 3. `offload_only_non_sliding` on Gemma 3
#
# Gemma 3's sliding layers never hold more than 512 tokens, so it can pay to keep them on the device and offload
# only the 3 full layers, which grow without bound: `offload_only_non_sliding=True`. It is the default of
# `offloaded_static` (StaticCache); `offloaded` (DynamicCache) defaults to `False` and moves every layer.
#
# **Predict first.** With a 60-token prompt (well inside the window), how much device memory does each setting
# save? Would the answer change at 10,000 tokens?

# %%
gemma_prompt = text.prompt_ids(gemma_tokenizer, 60)
gemma_runs = {only: resilient.device_peak(gemma, gemma_prompt, "offloaded", max_new_tokens=6,
                                          offload_only_non_sliding=only) for only in (True, False)}

# %%
# NBVAL_CHECK_OUTPUT
for only, r in gemma_runs.items():
    moved = sorted({e["layer_idx"] for e in r["trace"].transfers})
    print(f"offload_only_non_sliding={only!s:>5}: device peak {r['peak_device_bytes']:>9,} of "
          f"{r['peak_cache_bytes']:,} bytes, {r['transfers']} moves, layers moved: {moved}")

# %%
timeline.plot_timeline(gemma_runs[True]["trace"], steps=(1, 2),
                       title="Gemma 3, offload_only_non_sliding=True: sliding layers stay resident")

# %% [markdown]
# With `True`, only layers 5, 11 and 17 travel; the 15 sliding layers stay put (orange). (The moves counted
# here are the ones that change where a layer lives: transformers asks to prefetch "the next offloaded layer"
# before every update, so each sliding layer asks again for the same full layer; those repeats copy nothing.)
# At 60 tokens that saves little, because every layer is the same size. Past the window the picture flips: the sliding layers
# stop at 512 tokens (15 × 1 MiB on Gemma 3) while each full layer keeps growing (at 10,000 tokens, 20 MB each),
# and offloading just the full layers keeps the device share bounded for far fewer moves.
#
# ## 4. `resilient_generate`: fall back to offloading when memory runs out
#
# The cache guide's recipe: try `generate`; on `torch.OutOfMemoryError`, retry with the offloaded cache. On a
# GPU the error is real. Here kvlab simulates a device of a given size: a budgeted cache raises
# `SimulatedOutOfMemoryError` (a subclass of `torch.OutOfMemoryError`, so the same `except` catches both).
#
# **Predict first.** The prompt fills 48 × 46,080 = 2.2 MB. With a 2.5 MB budget, at which step does the
# DynamicCache run out, and does the offloaded retry fit?

# %% tags=["raises-exception"]
budgeted = resilient.budgeted_cache("dynamic", smollm2.config, budget_bytes=2_500_000)
smollm2.generate(prompt, attention_mask=torch.ones_like(prompt), max_new_tokens=12, do_sample=False, cache=budgeted)

# %%
# NBVAL_CHECK_OUTPUT
output, cache, attempts = resilient.resilient_generate(smollm2, prompt, budget_bytes=2_500_000, max_new_tokens=12)
print("attempts:", [(a["cache"], a["ok"], f"{a['peak_device_bytes']:,} B") for a in attempts])
print("same tokens as an unconstrained run:", output[0, 48:].tolist() == runs["dynamic"]["token_ids"])

# %% [markdown]
# On a GPU, the same function catches a real out-of-memory error; with no budget, only that triggers the retry:
#
# ```python
# model = model.to("cuda")
# output, cache, attempts = resilient.resilient_generate(model, ids.to("cuda"), max_new_tokens=4096)
# ```
#
# ## Takeaway
#
# - Offloaded caches keep two layers on the device (the one computing and the one being prefetched) and move
#   every layer twice per step; the tokens never change.
# - `offloaded_static` moves whole pre-allocated layers, empty slots included.
# - On sliding-window models, `offload_only_non_sliding=True` (the default) moves only the full layers, which
#   are the ones that grow.
# - `resilient_generate` turns an out-of-memory into a slower, successful generation.
#
# **Next:** [04 · Quantized caches](04_quantized_caches.ipynb): shrink each token instead of moving it.
