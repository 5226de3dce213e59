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
# # 03 · Offloading: keep the cache on the CPU, a layer or two on the accelerator at a time
#
# **Learning goal.** Run the cache guide's offloaded caches (`cache_implementation="offloaded"` /
# `"offloaded_static"`, `DynamicCache(..., offloading=True)`), know what they keep on the accelerator and
# why plain transformers refuses them on this CPU-only machine, read their prefetch/offload schedule, measure
# what `offload_only_non_sliding` keeps on the device on a sliding-window model, and fall back to offloading when
# memory runs out.
#
# **In kvlab's words.** An offloaded cache stores every layer in CPU memory. While layer *i* computes, it copies
# the next offloaded layer to the accelerator (a *prefetch*, on a side stream so that it can overlap compute)
# and, once layer *i* is done, moves it back (an *offload*). The accelerator then holds only the layers between
# their prefetch and their offload; the price is two copies per layer per step over the bus. `offloaded_static`
# does the same with StaticCache's fixed-size layers.
#
# **On this machine there is no accelerator**, so the copies are CPU-to-CPU no-ops. Inside `kvlab.watch`,
# kvlab runs transformers' exact schedule anyway, records every move, and computes from the record the bytes
# that *would* be resident on the device: every layer for an ordinary cache; for an offloaded one, only the
# layers between their prefetch and their offload. Section 5 counts the bytes the moves would carry over the bus,
# times decoding with and without offloading here, and estimates what the bus would add on a GPU.

# %%
# %matplotlib inline
import inspect
import os
import warnings
from collections import Counter

import ipywidgets as widgets
import torch
import transformers
from transformers import DynamicCache, StaticCache
from transformers.cache_utils import Cache

import kvlab
from kvlab.i18n import _, cache_kind_label, layer_kind_label, number, percent
from kvlab.live import live
from kvlab.measure import offload_time, residency, resilient, step_times, text
from kvlab.measure.formula import bytes_per_token_per_layer
from kvlab.measure.timing import compare
from kvlab.plots import residency as residency_plot
from kvlab.plots import timeline
from kvlab.predictions import score

warnings.filterwarnings("ignore", message=".*past_key_values.*deprecated")  # transformers 5.24 spells it `cache=`
torch.manual_seed(0)
transformers.logging.disable_progress_bar()
QUICK = os.environ.get("KVLAB_QUICK") == "1"  # shrinks the timed runs for CI; checked outputs hold either way
smollm2, smollm2_tokenizer = kvlab.load("smollm2")  # 30 full-attention layers
gemma, gemma_tokenizer = kvlab.load("gemma3")  # 18 layers: 5 sliding (window 512), then 1 full, three times

# %% [markdown]
# ## 1. Offloading the cache (Cache offloading)
#
# The guide's call: name the offloaded cache in `generate`. On this CPU-only build of torch it fails:

# %% tags=["raises-exception"]
inputs = smollm2_tokenizer("Moving a layer's keys and values to the CPU between uses", return_tensors="pt")
out = smollm2.generate(**inputs, do_sample=False, max_new_tokens=8, cache_implementation="offloaded")

# %% [markdown]
# The error is transformers' own: whenever `offloading` is on, `Cache.update` first makes the CUDA default
# stream wait for the prefetch stream, before every layer, whatever device the tensors are on. On a torch
# without CUDA that call cannot run:

# %%
# NBVAL_CHECK_OUTPUT
print("torch.cuda.is_available():", torch.cuda.is_available())
print("in Cache.update:", next(line.strip() for line in inspect.getsource(Cache.update).splitlines()
                               if "wait_stream" in line))

# %% [markdown]
# Inside `kvlab.watch` the same call runs: kvlab's twin of the offloaded cache runs transformers' schedule
# (prefetch, update, offload, layer by layer) and synchronises streams only when the tensors are on an
# accelerator. Below: the default cache, the guide's two names, and the two caches built by hand as the guide also
# shows, `DynamicCache(config=..., offloading=True)` and `StaticCache(config=..., max_cache_len=...,
# offloading=True)` passed as `past_key_values`.
#
# **Predict first.** SmolLM2 has 30 layers. With `cache_implementation="offloaded"`, what percentage of the whole
# cache sits on the device at the peak? And do the generated tokens of any of the five runs differ from the
# default cache's (True or False)?

# %%
guess = None  # % of the whole cache on the device at the peak, cache_implementation="offloaded": your guess
guess_tokens_differ = None  # True or False: your guess

# %%
with kvlab.watch(smollm2) as watch:
    out_default = smollm2.generate(**inputs, do_sample=False, max_new_tokens=8)
    out_offloaded = smollm2.generate(**inputs, do_sample=False, max_new_tokens=8, cache_implementation="offloaded")
    out_own = smollm2.generate(**inputs, do_sample=False, max_new_tokens=8,
                               past_key_values=DynamicCache(config=smollm2.config, offloading=True))
    out_static = smollm2.generate(**inputs, do_sample=False, max_new_tokens=8,
                                  cache_implementation="offloaded_static")
    slots = inputs.input_ids.shape[-1] + 8 - 1  # what generate sizes offloaded_static at: max_length - 1
    out_static_own = smollm2.generate(**inputs, do_sample=False, max_new_tokens=8,
                                      past_key_values=StaticCache(config=smollm2.config, max_cache_len=slots,
                                                                  offloading=True))
outputs = {"default cache": out_default, 'cache_implementation="offloaded"': out_offloaded,
           "DynamicCache(offloading=True)": out_own, 'cache_implementation="offloaded_static"': out_static,
           "StaticCache(offloading=True)": out_static_own}
runs = dict(zip(outputs, watch.traces))  # the five watched caches, in the order they ran

# %%
# NBVAL_CHECK_OUTPUT
offloaded = runs['cache_implementation="offloaded"']
share = 100 * residency.device_peak(offloaded) / offloaded.summary()["peak_bytes"]
display(score(guess, round(share, 2), unit="%", kind="share"))
tokens_differ = not all(torch.equal(generated, out_default) for generated in outputs.values())
display(score(guess_tokens_differ, tokens_differ, kind="choice"))

# %%
# NBVAL_CHECK_OUTPUT
per_layer = bytes_per_token_per_layer(smollm2.config, torch.float32)  # keys + values: 2 × 3 heads × 64 × 4 bytes
print(f"prompt: {inputs.input_ids.shape[-1]} tokens, 8 new; one token: {number(per_layer)} bytes per layer, "
      f"{number(smollm2.config.num_hidden_layers * per_layer)} in all {smollm2.config.num_hidden_layers} layers")
print(f"{'cache':>40} {'device peak':>12} {'whole cache':>12} {'moves':>6} {'bytes moved':>12}  same tokens")
for name, trace in runs.items():
    moves = residency.effective_moves(trace)
    print(f"{name:>40} {number(residency.device_peak(trace)):>12} {number(trace.summary()['peak_bytes']):>12} "
          f"{len(moves):>6} {number(sum(e['bytes'] for e in moves)):>12}  {torch.equal(outputs[name], out_default)}")

# %% [markdown]
# The offloaded cache peaks on the device at two layers' worth, 2/30 of the whole cache (58,368 of 875,520 bytes):
# the layer computing and the one being prefetched. The hand-built `DynamicCache(offloading=True)` is the same
# cache as `cache_implementation="offloaded"`, move for move. `offloaded_static` holds two *pre-allocated*
# layers: `generate` sizes a static cache at `max_length - 1` slots (transformers' source), 12 + 8 − 1 = 19
# tokens, since the last new token never goes back through the model; 19 × 46,080 = 875,520 bytes, the whole
# cache of the table. Every move copies that whole allocation, empty slots included, hence its larger bytes
# moved. The hand-built `StaticCache(..., max_cache_len=19, offloading=True)` is the same cache as
# `offloaded_static`, move for move. The tokens are identical in all five runs: offloading moves data, it never
# changes it.
#
# The bill is the traffic. Per step:

# %%
# NBVAL_CHECK_OUTPUT
per_step = Counter((e["step"], e["direction"]) for e in residency.effective_moves(offloaded))
for step in sorted({s for s, _ in per_step}):
    print(f"step {step}: {per_step[(step, 'prefetch')]:>2} prefetches, {per_step[(step, 'offload')]:>2} offloads")

# %% [markdown]
# At the prefill each layer is created on the device and offloaded after its update (30 offloads), and one layer
# is prefetched for the next step (1 prefetch). Each decode step prefetches and offloads every
# layer once (60 moves). 8 new tokens take the prefill and 7 decode steps: 31 + 7 × 60 = 451 moves, the count in
# the table.
#
# ## 2. The schedule, drawn (Cache offloading)
#
# In one decode step, each of the 30 layers is prefetched, updated and offloaded. **Predict first.** While the
# last layer (29) computes, which layer is prefetched?

# %%
guess = None  # a layer index: your guess

# %%
# NBVAL_CHECK_OUTPUT
order = [f"{e['direction'] if e['type'] == 'transfer' else 'update'} {e['layer_idx']}"
         for e in residency.schedule(offloaded, steps=(1, 1))]  # step 1's schedule, in the order the device saw it
last_update = order.index("update 29")
prefetched_then = next(int(e.split()[1]) for e in reversed(order[:last_update]) if e.startswith("prefetch"))
display(score(guess, prefetched_then, kind="choice"))

# %%
timeline.plot_timeline(offloaded, steps=(1, 2), title='SmolLM2, cache_implementation="offloaded": two decode steps')

# %%
# NBVAL_CHECK_OUTPUT
shown = [f"{_(move)} {layer}" for move, layer in (e.split() for e in order)]  # the moves in the reader's words
print(" → ".join(shown[:7]), "…")
print("…", " → ".join(shown[-4:]))

# %% [markdown]
# Each layer is prefetched while the previous one computes, updated, then offloaded; while the last layer
# computes, layer 0 is prefetched for the next step, so the schedule wraps around: in the figure, layer 0's ▲
# just left of the dotted line (prefetched in step 1 for step 2), and again at the top right, at the end of step 2.
#
# ## 3. `offload_only_non_sliding` on Gemma 3 (Cache offloading)
#
# The guide mentions one more option of `DynamicCache` and `StaticCache`: `offload_only_non_sliding`, which
# leaves the sliding-window layers on the device and offloads only the others. What are its defaults in this
# release? The signatures, and the caches `generate` builds for the two names:

# %%
gemma_inputs = {"input_ids": text.prompt_ids(gemma_tokenizer, 600)}  # (1, 600): past the 512-token window
gemma_inputs["attention_mask"] = torch.ones_like(gemma_inputs["input_ids"])
with kvlab.watch(gemma) as watch:
    gemma.generate(**gemma_inputs, do_sample=False, max_new_tokens=4, cache_implementation="offloaded")
    gemma.generate(**gemma_inputs, do_sample=False, max_new_tokens=4,
                   past_key_values=DynamicCache(config=gemma.config, offloading=True, offload_only_non_sliding=True))
    gemma.generate(**gemma_inputs, do_sample=False, max_new_tokens=4, cache_implementation="offloaded_static")
gemma_runs = dict(zip(["offloaded", "DynamicCache(..., True)", "offloaded_static"], watch.traces))

# %%
# NBVAL_CHECK_OUTPUT
for cls in (DynamicCache, StaticCache):
    default = inspect.signature(cls).parameters["offload_only_non_sliding"].default
    print(f"{cls.__name__}(offloading=True): offload_only_non_sliding defaults to {default}")
for name, cache in zip(gemma_runs, watch.caches):
    print(f"{name!r:>25}: {type(cache).__name__}, only_non_sliding={cache.only_non_sliding}")

# %% [markdown]
# So `True` is the default of `StaticCache` and therefore of `cache_implementation="offloaded_static"`;
# `DynamicCache`, and with it `cache_implementation="offloaded"`, defaults to `False` and offloads every layer.
# `generate` takes no option for it: to get `True` with a dynamic cache, build the cache yourself.
#
# **Predict first.** Gemma 3 with a 600-token prompt, past its 512-token window, 4 new tokens. At the last
# step's peak, what percentage of the whole cache is on the device with `True`, and with `False`?

# %%
guess_true = None  # % of the cache on the device, offload_only_non_sliding=True: your guess
guess_false = None  # % with False (cache_implementation="offloaded"): your guess

# %%
# NBVAL_CHECK_OUTPUT
settings = {"True": gemma_runs["DynamicCache(..., True)"], "False (offloaded)": gemma_runs["offloaded"],
            "True (offloaded_static)": gemma_runs["offloaded_static"]}
for guessed, trace in ((guess_true, settings["True"]), (guess_false, settings["False (offloaded)"])):
    last = residency.device_bytes_by_step(trace)[-1]
    display(score(guessed, round(100 * last["device_peak_bytes"] / last["cache_bytes_at_peak"], 1), unit="%",
                  kind="share"))

# %%
# NBVAL_CHECK_OUTPUT
print(f"one Gemma 3 token in one layer: {number(bytes_per_token_per_layer(gemma.config, torch.float32))} bytes")
for name, trace in settings.items():
    moved = sorted({e["layer_idx"] for e in residency.effective_moves(trace)})
    print(f"offload_only_non_sliding={name}: layers moved {moved}, "
          f"{len(residency.effective_moves(trace))} moves in {trace.summary()['steps']} steps")
    for row in residency.device_bytes_by_step(trace):
        kinds = ", ".join(f"{layer_kind_label(kind)} {number(b)}"
                          for kind, b in sorted(row["device_bytes_by_layer_kind"].items()))
        share = 100 * row["device_peak_bytes"] / row["cache_bytes_at_peak"]
        print(f"  step {row['step']}: device peak {number(row['device_peak_bytes']):>10} of "
              f"{number(row['cache_bytes_at_peak']):>10} bytes ({percent(share, 1):>6}; {kinds}), "
              f"{len(row['resident_at_peak'])} layers resident")

# %%
residency_plot.plot_device_bytes({"offload_only_non_sliding=True": settings["True"],
                                  "False (cache_implementation='offloaded')": settings["False (offloaded)"]},
                                 title="Gemma 3, 600-token prompt: cache bytes on the device at each step's peak")

# %% [markdown]
# What the measurement shows, past the window:
#
# - With `True`, only layers 5, 11 and 17 travel. At each step's peak the device holds the 15 sliding layers
#   *and* two of the three full layers (the one computing and the next one, prefetched): 17 of 18 layers,
#   93.6-94.4% of the cache. It saves one full layer (1,234,944 bytes at step 3), not most of the cache.
# - With `False`, every layer travels and the device holds two layers at the peak (a full and a sliding one),
#   11.1-11.8% of the cache here, for 18 layers moved twice per step instead of 3 (127 moves against 22).
# - A sliding layer stops growing at the window: after its first decode update it holds 512 tokens,
#   512 × 2,048 = 1,048,576 bytes, while a full layer grows by 2,048 bytes per token (1,228,800 → 1,230,848 →
#   1,232,896 → 1,234,944 in the `False` rows). At the prefill the sliding layers' buffers still hold the whole
#   600-token prompt, 1,228,800 bytes each (they keep a view of the last 511 tokens of it), which is why step 0
#   is the largest. During step 1 the sliding layers not yet updated still hold those buffers, so every sliding
#   layer on the device is down to 1,048,576 bytes only from step 2 on (15 × 1,048,576 = 15,728,640 with `True`).
# - `offloaded_static` (`True`) allocates its 3 full layers at `max_length - 1` = 600 + 4 − 1 = 603 tokens
#   (603 × 2,048 = 1,234,944 bytes) and its sliding layers at the 512-token window, and holds the same 17 of 18
#   layers on the device.
#
# So `True` does not keep the device share small or bounded: the 15 sliding layers stay, and the two resident
# full layers keep growing with the sequence. What it buys is fewer copies: 3 layers move instead of 18 (22 moves
# against 127). The guide's reason for it is that sliding layers "are usually short anyway", so offloading them
# may cost speed for little memory. On Gemma 3 at this length they are not little: at step 3 they hold
# 15,728,640 of the cache's 19,433,472 bytes, so keeping them on the device keeps 93.6% of the cache there,
# against 11.8% with `False`. Their part stays at 15 layers × 512 tokens while the full layers grow, so its share
# falls only as the sequence grows far past the window. Section 5 counts the bytes each setting moves and
# estimates what they would cost on a GPU.
#
# **Try it.** Toggle `offload_only_non_sliding` and move the prompt length: each move generates 2 tokens on
# Gemma 3 with `DynamicCache(config=gemma.config, offloading=True, offload_only_non_sliding=...)` inside
# `kvlab.watch` and draws the device-resident bytes of each step.

# %%
def measure_device_bytes(offload_only_non_sliding, prompt_tokens):
    ids = text.prompt_ids(gemma_tokenizer, prompt_tokens)
    cache = DynamicCache(config=gemma.config, offloading=True, offload_only_non_sliding=offload_only_non_sliding)
    with kvlab.watch(gemma) as watch:
        gemma.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=2,
                       past_key_values=cache)
    return residency_plot.plot_device_bytes(
        {f"offload_only_non_sliding={offload_only_non_sliding}": watch.trace},
        title=f"Gemma 3, {prompt_tokens}-token prompt: device peak per step (% of the whole cache)")


live(measure_device_bytes,
     offload_only_non_sliding=widgets.ToggleButtons(options=[True, False], value=True,
                                                    description="only non-sliding"),
     prompt_tokens=widgets.IntSlider(value=600, min=100, max=700, step=100, continuous_update=False,
                                     description="prompt tokens"))

# %% [markdown]
# ## 4. Falling back to offloading when memory runs out (Cache offloading)
#
# The guide's idea: call `generate`; if the accelerator raises `torch.OutOfMemoryError`, free what can be freed
# and call it again with `cache_implementation="offloaded"`. In our own words:

# %%
def generate_or_offload(model, **kwargs):
    """`generate`; on an out-of-memory error, once more with the offloaded cache."""
    try:
        return model.generate(**kwargs)
    except torch.OutOfMemoryError as err:
        print(f"caught {type(err).__name__}")  # on a GPU its message says how much was asked for
    if torch.cuda.is_available():
        torch.cuda.empty_cache()  # give the failed attempt's blocks back before retrying
    print("retrying with cache_implementation='offloaded'")
    return model.generate(**{**kwargs, "cache_implementation": "offloaded"})


# %% [markdown]
# **What is simulated.** Nothing runs out of memory on this CPU, so `resilient.simulated_device` plays a small
# accelerator. After every decoder layer it adds up the KV-cache bytes that would be on the device (read from the
# watch's record: all layers of an ordinary cache; for an offloaded one, the layer that just computed plus the one
# prefetched) and raises `SimulatedOutOfMemoryError`, a subclass of `torch.OutOfMemoryError`, once they pass its
# budget. Only the cache is counted, not the weights or activations. `generate_or_offload` is unchanged: its
# `except torch.OutOfMemoryError` catches the simulated error as it would a real one.
#
# **Predict first.** The prompt above is 12 tokens, and SmolLM2's cache takes 46,080 bytes per token (section 1's
# table). With a 600,000-byte budget, at which step does the default cache run out (0 is the prefill), and does the
# offloaded retry fit (True or False)?

# %%
guess_step = None  # the step the default cache runs out at: your guess
guess_retry_fits = None  # True or False: your guess

# %%
# NBVAL_CHECK_OUTPUT
with kvlab.watch(smollm2) as watch, resilient.simulated_device(smollm2, budget_bytes=600_000) as device:
    out = generate_or_offload(smollm2, **inputs, do_sample=False, max_new_tokens=8)
display(score(guess_step, device.out_of_memory[0]["step"], kind="count"))
display(score(guess_retry_fits, residency.device_peak(watch.trace) <= 600_000, kind="choice"))

# %%
# NBVAL_CHECK_OUTPUT
ran_out = device.out_of_memory[0]  # what the simulated device refused
print(f"the default cache ran out at step {ran_out['step']}, layer {ran_out['layer_idx']}: "
      f"{number(ran_out['bytes'])} bytes needed, 600,000 available")
print("caches used:", ", ".join(cache_kind_label(t.meta["cache_kind"]) for t in watch.traces))
print(f"retry's device peak: {number(residency.device_peak(watch.trace))} bytes of the 600,000")
print("same tokens as the unconstrained run:", torch.equal(out, out_default))

# %% [markdown]
# The default cache ran out at step 2, while adding the 14th token: 13 × 46,080 = 599,040 bytes fit, and the
# 1,536 bytes of that token's layer 0 (section 1's bytes per layer) do not (600,576 > 600,000). The retry
# offloads, holds two layers on the device (58,368 bytes, as in section 1), fits easily, and produces the same
# tokens. On a GPU, without `simulated_device`, only a real `torch.OutOfMemoryError` triggers the retry (with
# `inputs` moved to the model's device), and `torch.cuda.empty_cache()` gives the failed attempt's memory back
# first.
#
# ## 5. What the traffic costs: bytes counted, time measured, the bus estimated (Cache offloading)
#
# Offloading trades device memory for traffic. Three numbers of three kinds: the bytes the schedule hands over
# at each step (exact, counted from the trace, the same on any machine), the decode time per token with and
# without offloading on this CPU (measured, with its spread and a verdict), and what those bytes would take over
# a GPU's PCIe bus (an estimate from a stated bandwidth, not a measurement).
#
# First the bytes. On this CPU every transfer event has `moved=False` (its source and destination are both
# `cpu`), so `trace.work_by_step()`, which counts only moves between devices, reports 0 offload and prefetch
# bytes. `offload_time.transfer_bytes_by_step` counts the bytes of the schedule's moves regardless (the moves
# that change where a layer lives, as in section 1's table): on a GPU each of those bytes crosses PCIe.

# %%
# NBVAL_CHECK_OUTPUT
print("work_by_step(), bytes that changed device:",
      sum(r["offload_bytes"] + r["prefetch_bytes"] for r in offloaded.work_by_step()))
print('cache_implementation="offloaded", SmolLM2, bytes the schedule hands over:')
print(f"{'step':>4} {'offloaded':>10} {'prefetched':>10} {'in all':>10} {'cache after the step':>21}")
for row, cache_bytes in zip(offload_time.transfer_bytes_by_step(offloaded), offloaded.bytes_by_step()):
    print(f"{row['step']:>4} {number(row['offload_bytes']):>10} {number(row['prefetch_bytes']):>10} "
          f"{number(row['bytes']):>10} {number(cache_bytes):>21}")
traffic = {f"SmolLM2, {name}": offload_time.offload_traffic(trace) for name, trace in runs.items()}
traffic["Gemma 3 (600), offloaded"] = offload_time.offload_traffic(gemma_runs["offloaded"])
traffic["Gemma 3 (600), only_non_sliding=True"] = offload_time.offload_traffic(gemma_runs["DynamicCache(..., True)"])
print(f"\n{'':>48} {'per decode step':>15} {'per new token':>14} {'in all':>11}")
for name, t in traffic.items():
    print(f"{name:>48} {number(t['bytes_per_decode_step']):>15} {number(t['bytes_per_generated_token']):>14} "
          f"{number(t['total_bytes']):>11}  ({t['generated_tokens']} new tokens)")

# %% [markdown]
# Read the first table row by row. Each decode step offloads every layer with its new token, exactly the whole
# cache after the step (the last column), and prefetches every layer back before its update, one token shorter
# (layer 0 is prefetched at the end of the step, already one token longer): a step hands over just under twice
# the cache. The bytes grow with the context, so a long prompt moves proportionally more per step. The default
# cache hands over nothing; `offloaded_static` hands over its whole allocation in both directions at every step;
# `offload_only_non_sliding=True` moves only Gemma 3's 3 full layers. "Per new token" divides everything,
# prefill included, by the tokens generated (one per step at batch 1).
#
# What would a CPU timing of this tell? Here is what an offload does to a tensor that is already on the CPU:

# %%
# NBVAL_CHECK_OUTPUT
keys = torch.zeros(1, 3, 13, 64)  # one SmolLM2 layer's keys: (batch, kv_heads, tokens, head_dim)
print("keys.to('cpu') is keys:", keys.to("cpu") is keys)

# %% [markdown]
# The very same tensor comes back: on this machine an offload or a prefetch copies nothing. So a CPU timing of
# the offloaded cache measures the schedule's bookkeeping (two more calls per layer per step, and kvlab's record
# of them), not a bus; it cannot say what offloading costs on a GPU. It still answers a narrower question: does
# running the schedule cost anything by itself? Both caches run inside `kvlab.watch` (the offloaded one runs
# nowhere else on this CPU), so the recording's overhead is on both sides. Each repeat is one `generate` of a
# fixed number of new tokens, timed per decoded token by a `DecodeClock` streamer (the prefill left out), the two
# caches interleaved (`step_times.decode_step_times`, the loop notebook 04 times its quantized caches with).
# Each time prints as the median over the repeats with its interquartile range (IQR).

# %%
# Not checked: times depend on the machine.
NEW_TOKENS, REPEATS, WARMUP = (4, 1, 0) if QUICK else (24, 5, 1)


labels = {kind: cache_kind_label(kind) for kind in ("dynamic", "offloaded")}  # the runs' names in the reader's words
with kvlab.watch(smollm2):  # greedy, exactly NEW_TOKENS tokens after the same prompt, each way
    decoded = step_times.decode_step_times(
        smollm2, inputs["input_ids"],
        {labels["dynamic"]: {}, labels["offloaded"]: {"cache_implementation": "offloaded"}},
        new_tokens=NEW_TOKENS, repeats=REPEATS, warmup=WARMUP)
decode_times = {kind: decoded[label].decode for kind, label in labels.items()}  # seconds per decoded token
for measured in decode_times.values():
    print(f"{measured.label:>12}: {measured.describe()} per decoded token")
print(compare(decode_times["dynamic"], decode_times["offloaded"], warn=False).verdict())

# %% [markdown]
# Read the verdict as printed: an interval that contains 1 means no detectable difference, and "too noisy to
# tell" (too few repeats) says nothing either way; one that excludes 1 is a difference in the schedule's
# bookkeeping on this CPU (its calls and their record). In no case is it the price of the traffic, which needs a
# bus.
#
# For a GPU, the bytes can be turned into time only with a bandwidth, and here that bandwidth is **assumed, not
# measured**: 25 GB/s over PCIe 4.0 x16. That link carries at most 31.5 GB/s per direction (16 GT/s on each of
# 16 lanes, 128b/130b encoding), and copies reach less: pinned host memory "can attain roughly 12 GB/s" on a
# PCIe x16 Gen3 card, about three quarters of that generation's maximum, which is half of Gen4's (source: NVIDIA,
# CUDA C++ Best Practices Guide, "Pinned Memory"); the same share of Gen4's maximum is about 24 GB/s, rounded
# here to 25. A PCIe 3.0 link, or 8 lanes, halves the maximum, and there the estimate is optimistic. Two figures
# per cache, from the exact bytes per decode step above: if no transfer overlapped compute, every byte adds to
# the step; transformers issues each prefetch on a side stream (`prefetch_stream`, in `Cache.prefetch`) so that
# it runs while the previous layer computes, but each offload on the default stream right after the layer's
# update (`Cache.offload`, called at the end of `Cache.update`; both in `transformers/cache_utils.py`), so if
# every prefetch were hidden the offloads alone would still add theirs.

# %%
# NBVAL_CHECK_OUTPUT
BANDWIDTH = offload_time.PCIE4_X16_EFFECTIVE_BYTES_PER_S  # an assumption, not a measurement
print(f"estimate, not measured: bytes per decode step / an assumed {number(BANDWIDTH / 1e9)} GB/s (PCIe 4.0 x16)")
print(f"{'':>48} {'nothing overlapped':>18} {'prefetches hidden':>18}")
for name, t in traffic.items():
    serial = offload_time.pcie_estimate(t["bytes_per_decode_step"], BANDWIDTH)
    offloads = offload_time.pcie_estimate(t["offload_bytes_per_decode_step"], BANDWIDTH)
    print(f"{name:>48} {number(serial.seconds * 1e6, 1):>15} µs {number(offloads.seconds * 1e6, 1):>15} µs")
per_token = offloaded.bytes_by_step()[1] - offloaded.bytes_by_step()[0]  # SmolLM2's whole cache, per token
for tokens in (8_192, 32_768):
    serial = offload_time.pcie_estimate(2 * per_token * tokens, BANDWIDTH)  # just under twice the cache per step
    print(f"SmolLM2, offloaded, {number(tokens)} tokens in the cache: about 2 × {number(per_token)} × "
          f"{number(tokens)} = {number(2 * per_token * tokens)} bytes per decode step, "
          f"{number(serial.seconds * 1e3, 1)} ms if nothing overlapped")

# %% [markdown]
# With section 1's 12-token prompt the traffic is small, and so is the estimate; it grows linearly with the
# context, to the milliseconds per step of the last lines. How much of it the prefetch stream hides only a run
# on a GPU can measure; what this notebook gives exactly is the bytes.
#
# ## Takeaway
#
# - `cache_implementation="offloaded"` / `"offloaded_static"` and `DynamicCache`/`StaticCache(...,
#   offloading=True)`, when every layer is offloaded (SmolLM2 has only full layers), keep two layers on the
#   device at the peak (the one computing and the one prefetched) and move every layer twice per step; the
#   tokens never change. Plain transformers needs CUDA streams for them; `kvlab.watch` runs the schedule on a CPU.
# - `offloaded_static` moves whole pre-allocated layers, empty slots included.
# - `offload_only_non_sliding` defaults to `True` for `StaticCache` (so for `offloaded_static`) and to `False` for
#   `DynamicCache` (so for `offloaded`). `True` moves only the full layers, far fewer copies, but keeps every
#   sliding layer plus two full layers on the device: on Gemma 3 past the window, 17 of 18 layers.
# - Catching `torch.OutOfMemoryError` and retrying with `cache_implementation="offloaded"` turns an
#   out-of-memory into a successful generation that moves every layer out and back at every decode step: about
#   twice its cache in bytes, per step (section 5).
# - The bytes are exact on any machine; their time is not. On this CPU the moves copy nothing, so the timing
#   (with its verdict) shows only what the schedule's bookkeeping costs. On a GPU, at an assumed 25 GB/s, the
#   bytes would add between the offloads' time (every prefetch hidden) and all the bytes' time (nothing hidden)
#   to each decode step: an estimate, not a measurement.
#
# **Next:** [04 · Quantized caches](04_quantized_caches.ipynb): shrink each token instead of moving it.
