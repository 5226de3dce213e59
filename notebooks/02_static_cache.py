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
# **Learning goal.** Run a `StaticCache` the two ways the cache guide shows (`cache_implementation="static"`
# and a cache you build and pass in), see what it allocates and when, measure the slots it holds but masks,
# quantify the cost of sizing one cache for the longest request, and know when transformers compiles the
# decoding step for you (on an accelerator) and when it does not (on this CPU).
#
# **In kvlab's words.** A `StaticCache` allocates every layer at `max_cache_len` tokens before the first token
# arrives and writes each new token into the next free slot. The tensors never change shape, so a compiled
# graph can be reused at every step; the price is that the empty slots exist from the start. Attention must
# skip them, so they are *masked*: allocated memory that holds nothing yet. `kvlab.watch` counts, per step,
# the slots allocated, live and masked.

# %%
# %matplotlib inline
import copy
import datetime
import inspect
import os
import platform
import warnings

import ipywidgets as widgets
import torch
import transformers
from transformers import CompileConfig, DynamicCache, StaticCache
from transformers.generation.utils import GenerationMixin

import kvlab
from kvlab.i18n import marks, number, percent
from kvlab.live import live
from kvlab.measure import compiled, decode_step, formula, text, timing
from kvlab.plots import decode_step as decode_step_plots
from kvlab.plots import growth, slots
from kvlab.plots.verdicts import add_verdicts
from kvlab.predictions import score

warnings.filterwarnings("ignore", message=".*past_key_values.*deprecated")  # transformers 5.24 spells it `cache=`
torch.manual_seed(0)
transformers.logging.disable_progress_bar()
model, tokenizer = kvlab.load("smollm2")  # SmolLM2-135M-Instruct, 30 layers, float32, CPU

# %% [markdown]
# ## 1. A fixed-size cache (Cache de tamanho fixo)
#
# The guide's first way: name the cache in `generate`. transformers builds a `StaticCache` for this call, sized
# at `max_length - 1` slots (the prompt plus `max_new_tokens`, minus the last token, which never goes back
# through the model), or larger when an earlier call on the same model needed more (the end of this section shows
# it), and decodes greedily into it.

# %%
# NBVAL_CHECK_OUTPUT
inputs = tokenizer("A static cache reserves all of its memory before", return_tensors="pt")
out = model.generate(**inputs, do_sample=False, max_new_tokens=12, cache_implementation="static")
print(tokenizer.batch_decode(out, skip_special_tokens=True)[0])

# %% [markdown]
# The second way: build the cache yourself, with the size you choose, and pass it as `past_key_values`. The
# layers are allocated at `max_cache_len` slots; the cache reports how many tokens it has written.

# %%
# NBVAL_CHECK_OUTPUT
past_key_values = StaticCache(config=model.config, max_cache_len=128)
out_own = model.generate(**inputs, do_sample=False, max_new_tokens=12, past_key_values=past_key_values)
print("same tokens as cache_implementation='static':", torch.equal(out, out_own))
print("prompt tokens:", inputs.input_ids.shape[-1],
      "| tokens written to the cache:", int(past_key_values.get_seq_length()))
print("layer 0 keys, (batch, kv_heads, slots, head_dim):", tuple(past_key_values.layers[0].keys.shape))

# %% [markdown]
# 20 tokens written (the 9-token prompt and 12 generated tokens, minus the last one, which `generate` returns
# without running it through the model) into 128 slots per layer.
#
# **Predict first.** What share of this cache's slots is masked (allocated, still empty) when `generate`
# returns? And in the cache `cache_implementation="static"` built?

# %%
guess_own = None  # % of the 128-slot cache's slots masked at the end: your guess
guess_auto = None  # % of the slots masked in the cache cache_implementation="static" built: your guess

# %% [markdown]
# The same three calls, unchanged, inside `kvlab.watch`: the two static caches and, for comparison, the
# default `DynamicCache`. The watch records one trace per cache, in the order the model used them. The first line
# makes `generate` forget the static size it built before (the end of this section shows why that matters), so the
# cell gives the same numbers whatever ran before it.

# %%
vars(model).pop("_previous_max_cache_length", None)  # the largest static size generate built on this model so far
with kvlab.watch(model) as watch:
    out_auto = model.generate(**inputs, do_sample=False, max_new_tokens=12, cache_implementation="static")
    past_key_values = StaticCache(config=model.config, max_cache_len=128)
    out_own = model.generate(**inputs, do_sample=False, max_new_tokens=12, past_key_values=past_key_values)
    out_dynamic = model.generate(**inputs, do_sample=False, max_new_tokens=12)
auto, own, dynamic = watch.traces

# %%
# NBVAL_CHECK_OUTPUT
def print_trace(trace, label):
    by_step, s = trace.bytes_by_step(), trace.summary()
    print(f"{label:>17}: {number(by_step[0]):>9} bytes after the prefill, {number(by_step[-1]):>9} at the end; "
          f"slots allocated {number(s['slots_allocated']):>5} ({s['slots_allocated'] // 30} per layer), "
          f"live {number(s['slots_live'])}, masked {number(s['slots_masked'])} ({marks(str(s['waste_pct']))}%)")


print_trace(auto, label="static (generate)")
print_trace(own, label="StaticCache(128)")
print_trace(dynamic, label="dynamic")
print("same tokens as without the watch:", all(torch.equal(out, o) for o in (out_auto, out_own, out_dynamic)))
print("static (generate), masked slots per step:", [r["slots_masked"] for r in auto.slots_by_step()])
print(f"one token: {number(formula.bytes_per_token_per_layer(model.config, torch.float32))} bytes per layer, "
      f"{number(formula.kv_bytes_per_token(model.config, torch.float32))} bytes over the 30 layers")

# %%
# NBVAL_CHECK_OUTPUT
display(score(guess_own, own.summary()["waste_pct"], unit="%", kind="share", label="StaticCache(128):"))
display(score(guess_auto, auto.summary()["waste_pct"], unit="%", kind="share", label="static (generate):"))

# %% [markdown]
# `cache_implementation="static"` sized its cache at 20 slots per layer, exactly what this call writes, so
# nothing is masked at the end (its masked slots shrink step by step to zero). The 128-slot cache holds
# 30 layers × 128 slots × 1,536 bytes = 5,898,240 bytes from the prefill on, 84.38% of its slots masked at the
# end; the DynamicCache holds only what it has seen (9 tokens × 46,080 bytes after the prefill, 20 × 46,080 at
# the end). The tokens are the same with and without the watch and for all three caches: the masked slots never
# change a token. They are not free in compute, though: eager and SDPA attention score the query against every
# slot and only then mask the empty ones. Section 3 measures that.

# %%
slots.plot_slots(own, title="StaticCache(max_cache_len=128): allocated vs live vs masked per step")

# %%
growth.plot_growth({"StaticCache(128)": own, "static (generate)": auto, "DynamicCache": dynamic},
                   by_layer_kind=False,
                   title="Bytes against tokens: flat at the allocation vs growing with the sequence")

# %% [markdown]
# "Sized for the call" has one exception the guide does not mention. `generate` remembers, on the model, the
# largest `max_cache_len` it has built for `cache_implementation="static"` (`model._previous_max_cache_length`,
# set in transformers' `_prepare_static_cache`) and never builds a smaller one, so that a graph compiled for one
# call fits the next. Ask for 30 new tokens, then for 12 again:

# %%
# NBVAL_CHECK_OUTPUT
with kvlab.watch(model) as watch:
    model.generate(**inputs, do_sample=False, max_new_tokens=30, cache_implementation="static")
    model.generate(**inputs, do_sample=False, max_new_tokens=12, cache_implementation="static")
print_trace(watch.traces[0], label="30 new tokens")
print_trace(watch.traces[1], label="then 12 new")
print("size generate keeps on the model:", model._previous_max_cache_length)
del model._previous_max_cache_length  # forget it: the next static call is sized for itself again

# %% [markdown]
# The 12-token call, which built 20 slots per layer above, now gets the 38 slots of the 30-token call (9 + 30 − 1),
# and 18 of them stay masked. Run the watched cell above after this one without its first line and "0%
# masked" is no longer true. Passing your own `StaticCache`, as in the second way, gives the size you chose
# whatever ran before.

# %% [markdown]
# ## 2. One size for every request (Cache de tamanho fixo)
#
# The guide warns about this case: a StaticCache is sized once, for the longest sequence it must hold, and every
# later, shorter sequence pays for that size. A server that must accept a 200-token prompt with 8 new tokens
# needs `max_cache_len` ≥ 208; say 256.
#
# **Predict first.** With that size, what share of the allocated slots is masked at the end of a request with
# a 20-token prompt (8 new tokens)? With a 60-token prompt?

# %%
guess_20 = None  # % of the 256-slot cache masked after a 20-token prompt + 8 new: your guess
guess_60 = None  # the same after a 60-token prompt: your guess

# %%
server_cache_len = 256
requests = {"200-token prompt": 200, "60-token prompt": 60, "20-token prompt": 20}
with kvlab.watch(model) as watch:
    for n_tokens in requests.values():
        request = {"input_ids": text.prompt_ids(tokenizer, n_tokens)}
        request["attention_mask"] = torch.ones_like(request["input_ids"])
        model.generate(**request, do_sample=False, max_new_tokens=8,
                       past_key_values=StaticCache(config=model.config, max_cache_len=server_cache_len))
runs = dict(zip(requests, watch.traces))

# %%
# NBVAL_CHECK_OUTPUT
waste = {row["run"]: row["waste_pct"] for row in slots.run_slots(runs)}
display(score(guess_20, waste["20-token prompt"], unit="%", kind="share", label="20-token prompt:"))
display(score(guess_60, waste["60-token prompt"], unit="%", kind="share", label="60-token prompt:"))

# %%
# NBVAL_CHECK_OUTPUT
for row in slots.run_slots(runs):
    dynamic_bytes = formula.kv_bytes(model.config, row["slots_live"] // 30)  # live slots of 30 layers → tokens
    print(f"{row['run']:>17}: {number(row['final_bytes']):>10} bytes allocated, {number(row['slots_masked']):>5} of "
          f"{number(row['slots_allocated'])} slots masked ({percent(row['waste_pct'], 1):>7}); a DynamicCache would "
          f"hold {number(dynamic_bytes):>9} bytes")

# %%
slots.plot_runs(runs, title="One StaticCache size (256) for every request: live vs masked slots")

# %% [markdown]
# The short requests pay for the long one: 89.5% of the 20-token prompt's cache is masked. Two ways out: a
# DynamicCache (no waste, but changing shapes, so no reusable compiled graph), or a few StaticCaches of
# different sizes (length buckets), each request going to the smallest that fits.
#
# **Try it.** Move `max_cache_len`: the 9-token prompt above generates 6 tokens into a `StaticCache` of that
# size inside `kvlab.watch`, and the plot shows live and masked slots per step.

# %%
def measure_waste(max_cache_len):
    with kvlab.watch(model) as watch:
        model.generate(**inputs, do_sample=False, max_new_tokens=6,
                       past_key_values=StaticCache(config=model.config, max_cache_len=max_cache_len))
    s = watch.trace.summary()
    return slots.plot_slots(watch.trace, title=f"StaticCache(max_cache_len={max_cache_len}): "
                                               f"{number(s['slots_masked'])} of {number(s['slots_allocated'])} slots "
                                               f"masked ({percent(s['waste_pct'], 1)})")


live(measure_waste, max_cache_len=widgets.IntSlider(value=64, min=16, max=512, step=16, continuous_update=False,
                                                    description="max_cache_len"))

# %% [markdown]
# ## 3. What the masked slots cost in time (Cache de tamanho fixo)
#
# The guide's warning about a StaticCache is its memory; the masked slots cost compute as well. Attention here
# (SDPA on the CPU) computes `Q Kᵀ` over all `max_cache_len` slots of every layer, then masks the empty ones, so
# one decode step's attention work grows with `max_cache_len` even though the cache holds the same 6 tokens.
#
# **Predict first.** One decode step after a 6-token prompt takes some time with a DynamicCache (7 slots per
# layer). How many times longer does it take with `StaticCache(max_cache_len=4096)`, which scores 4,096 slots
# per layer? Edit the guess, then run the measurement.

# %%
guess = None  # time of one step with StaticCache(4096) / time with DynamicCache: your guess

# %% [markdown]
# The caches are built the guide's way and passed to the model; `decode_step.time_decode_step` prefills each
# with the same 6 tokens, then times the same one-token step against each, 7 times, interleaved, rolling the
# cache back with `crop(-1)` after each repeat. Each time is printed as the median of the 7 with their
# interquartile range (IQR: the middle half of the repeats). Inside `kvlab.watch` the trace counts the slots
# each step attended (exact, checked) beside the time (not checked: it depends on the machine).

# %%
short_prompt = text.prompt_ids(tokenizer, 6)  # (1, 6)
decode_caches = {"DynamicCache": DynamicCache(config=model.config)}
for max_cache_len in (64, 1024, 4096):
    decode_caches[f"StaticCache({max_cache_len})"] = StaticCache(config=model.config, max_cache_len=max_cache_len)
with kvlab.watch(model):
    decode_steps = decode_step.time_decode_step(model, short_prompt, decode_caches, repeats=7)

# %%
# NBVAL_CHECK_OUTPUT
for label, step in decode_steps.items():
    print(f"{label:>17}: one decode step scores {number(step.slots_attended):>7} key slots over 30 layers, "
          f"{number(step.attention_flops):>11} attention FLOPs")

# %%
# Not checked: times depend on the machine. Your guess against the measured ratio, folded until you have guessed.
reference = decode_steps["DynamicCache"].timing
ratio_4096 = timing.compare(reference, decode_steps["StaticCache(4096)"].timing, warn=False).ratio
display(score(guess, ratio_4096, unit="x", kind="amount"))

# %%
# Not checked: times depend on the machine. Medians of 7 interleaved repeats, IQR, and the ratio's 95% interval.
for label, step in decode_steps.items():
    print(f"{label:>17}: {step.timing.describe()}")
step_verdicts = [timing.compare(reference, step.timing).verdict() for step in list(decode_steps.values())[1:]]
print("\n".join(step_verdicts))

# %%
# Not checked: times depend on the machine. The box under the panels carries the verdicts printed above.
add_verdicts(decode_step_plots.plot_decode_steps(decode_steps, title="SmolLM2, one decode step after a 6-token prompt"),
             step_verdicts)

# %% [markdown]
# The counts are exact: 7 slots per layer for the DynamicCache (the 6 held tokens and the step's own), and
# `max_cache_len` per layer for each StaticCache, masked slots included: the attention work grows 585-fold
# from the DynamicCache to 4,096 slots (122,880 / 210). The work says the time should grow with
# `max_cache_len` too, but by far less: the rest of the step (the 30 layers' matrix products on one token)
# does not depend on the cache. The verdicts above (also in the box under the figure) say how much it grew on
# this run, each ratio with its interval (an interval that contains 1 means no detectable
# difference). The counts hold whatever the machine: every slot of `max_cache_len` is scored at every step, so
# sizing `max_cache_len` close to what requests need saves that work as well as the memory.
#
# ## 4. Compiling the decoding step (Cache de tamanho fixo)
#
# The guide says `cache_implementation="static"` also turns on automatic compilation of the decoding step. In
# transformers 5.25 that decision is `GenerationMixin._valid_auto_compile_criteria`
# (`transformers/generation/utils.py`). It compiles only when the cache is compileable and not a plain
# `DynamicCache`, `disable_compile` is not set, no part of the model is offloaded to CPU or disk, a quantized
# model's quantizer allows it, and the hardware test below passes:

# %%
# NBVAL_CHECK_OUTPUT
source = inspect.getsource(GenerationMixin._valid_auto_compile_criteria)
start = source.rindex("\n", 0, source.index("valid_hardware =")) + 1
print(inspect.cleandoc(source[start:source.index(")\n", start) + 1]))

static_cache = StaticCache(config=model.config, max_cache_len=64)
print("\nmodel device:", model.device.type)
print("auto-compile here:", model._valid_auto_compile_criteria({"cache": static_cache}, model.generation_config))
opted_in = copy.deepcopy(model.generation_config)
opted_in.compile_config = CompileConfig()
opted_in.compile_config._compile_all_devices = True  # private flag; what kvlab.measure.compiled sets
print("with CompileConfig._compile_all_devices = True:",
      model._valid_auto_compile_criteria({"cache": static_cache}, opted_in))

# %% [markdown]
# So the `generate` calls above ran eagerly: on a CPU transformers compiles only when told to through the
# private attribute `CompileConfig._compile_all_devices` (transformers' own comment calls it a flag for testing
# on e.g. a CPU, "often not optimal"). kvlab's opt-in below (`kvlab.measure.compiled.static_generate`) sets
# exactly that flag on the `compile_config` it passes to `generate`.
#
# The fixed shape is what makes a StaticCache compile-friendly: transformers compiles the *decoding* forward once
# and replays it at every step.
#
# **Predict first.** After compiling for a 40-token prompt, does a 60-token prompt compile a new graph? Does a
# different `max_cache_len`? Set each guess to `True` or `False`; they are scored when the cell compiles.

# %%
guess_new_prompt = None  # does a 60-token prompt compile a new graph? True or False: your guess
guess_new_size = None  # does max_cache_len 256 (instead of 128) compile a new graph? True or False: your guess

# %% [markdown]
# Compiling with inductor takes too long for the test suite (the lines below print each run's time, compiling
# included, and inductor caches what it compiled on disk: `fx_graph_cache`, on by default in
# `torch/_inductor/config.py`, so a later run on the same machine can take less), so the cell
# compiles only when `KVLAB_COMPILE=1` is set; without it (as in the test suite) it prints "skipped". The output
# committed below was produced with `KVLAB_COMPILE=1` when this notebook was executed for the repository (see
# the printed line for the machine and date). What is compiled: the decoding forward of SmolLM2 (transformers'
# `generate` with `compile_config`), with inductor, for a StaticCache of 128 slots; the prefill stays eager. The
# steady comparison times eager and compiled `generate` (40-token prompt, 16 new tokens, same cache size) 5 times
# each, interleaved, once the graph exists.

# %%
prompt = text.prompt_ids(tokenizer, 40)  # (1, 40)
if os.environ.get("KVLAB_COMPILE") == "1":
    report = compiled.compile_report(model, [prompt, text.prompt_ids(tokenizer, 60)], new_tokens=16, max_cache_len=128)
    print(f"executed {datetime.date.today()} on {platform.machine()}, {os.cpu_count()} CPUs, torch "
          f"{torch.__version__}, {torch.get_num_threads()} threads")
    for run in report["runs"]:
        print(f"  {run['label']:>22}: {run['new_graphs']} new graph(s) compiled, "
              f"{number(run['seconds'], 2, grouping=False)} s (one run)")
    print("same tokens as eager:", report["same_tokens"])
    steady = report["steady"]
    print(f"steady, 5 interleaved runs each: eager {number(steady['a']['median_s'], 2, grouping=False)} s, compiled "
          f"{number(steady['b']['median_s'], 2, grouping=False)} s (medians); {steady['verdict']}")
    new_graphs = {run["run"]: run["new_graphs"] for run in report["runs"]}
    display(score(guess_new_prompt, new_graphs["prompt of 60 tokens"] > 0, kind="choice", label="60-token prompt:"))
    display(score(guess_new_size, new_graphs["max_cache_len 256"] > 0, kind="choice", label="max_cache_len 256:"))
else:
    print("skipped: set KVLAB_COMPILE=1 to compile (the committed run prints its times); the guesses are scored then")

# %% [markdown]
# What to look for: the first compiled run pays the compilation; the same prompt again reuses the graph; a new
# prompt length compiles **nothing** (the prefill is eager and the decode graph sees the same shapes); a new
# `max_cache_len` changes the cache tensors' shape and compiles again. The first compiled run's time includes
# compiling, and so does the new size's.
#
# The steady line compares eager and compiled `generate` once the graph exists (16 tokens, the eager prefill
# included), and its verdict, with its interval, is the only claim about speed here: this notebook does not
# measure where a decoding step's time goes, so it makes no forecast, and it measures nothing on a GPU. An
# interval that contains 1 means no detectable difference on this CPU.
#
# ### Why the guide's table says "No" for the DynamicCache
#
# The criteria printed above refuse a plain `DynamicCache`: with one, `generate` never compiles. Compile the
# decoding forward anyway, as transformers would (`torch.compile(..., dynamic=False)`, its `CompileConfig`
# default: a graph is specialised to the shapes of its inputs), and count the graphs `torch.compile` traces at
# each decoding call: `kvlab.measure.compiled.decode_graphs` wraps `model.forward` for one `generate` and counts
# them (with a counting backend, no inductor: which shapes need a graph does not depend on the backend). The
# DynamicCache's keys grow by one slot every call, so every call meets a new shape; the StaticCache's keep
# `max_cache_len` slots. Tracing takes seconds per graph, so this also runs only with `KVLAB_COMPILE=1`.

# %%
if os.environ.get("KVLAB_COMPILE") == "1":
    for name, cache in {"DynamicCache": DynamicCache(config=model.config),
                        "StaticCache(128)": StaticCache(config=model.config, max_cache_len=128)}.items():
        steps = compiled.decode_graphs(model, prompt, cache, new_tokens=6)  # 5 decoding calls after the prefill
        print(f"{name:>16}: key slots at each decoding call {[step['key_slots'] for step in steps]}; graphs traced "
              f"{[step['new_graphs'] for step in steps]}, {sum(step['new_graphs'] for step in steps)} in all")
else:
    print("skipped: set KVLAB_COMPILE=1 to trace the graphs (seconds per graph on a CPU)")

# %% [markdown]
# With a DynamicCache every decoding call traces a graph of its own, for a cache one slot longer than the last: a
# compiled step that is never replayed, so compiling only adds its cost. Past `torch._dynamo.config.recompile_limit`
# (8) graphs for one function, dynamo stops compiling it and runs it eagerly (`recompile_limit = 8` in
# `torch/_dynamo/config.py`, under the comment "disable (for a function) when cache reaches this size"). The
# StaticCache's single graph is replayed at every call. (Without `KVLAB_COMPILE=1`, the cell above is skipped;
# the printed lines in the committed notebook come from a run with it.)
#
# ## Takeaway
#
# - `cache_implementation="static"` sizes a StaticCache for the call (prompt + `max_new_tokens` − 1 slots), or
#   reuses the larger size an earlier call on the same model needed; `StaticCache(config=..., max_cache_len=...)`
#   passed as `past_key_values` holds the size you chose. Either way every
#   layer holds `max_cache_len` slots from the start and the unused ones are masked; the tokens are the same as with a
#   DynamicCache, but attention still scores the masked slots, so a larger `max_cache_len` adds attention work to every
#   decode step.
# - Sized for the longest request, it wastes most of its memory on short ones; bucket by length or use a
#   DynamicCache when lengths vary and compile is not needed.
# - transformers compiles the decoding step by itself only on an accelerator (cuda, xpu, neuron, tpu, mps); on a CPU
#   only the private `CompileConfig._compile_all_devices` turns it on. Then the fixed shape lets one decoding
#   graph be reused; only a new cache shape compiles again. A DynamicCache changes shape every step: compiled
#   anyway, it traces a new graph at every decoding call. Whether compiling speeds decoding up on this CPU is the
#   steady verdict, printed with its interval.
#
# **Next:** [03 · Offloading](03_offloading.ipynb): keep the cache in CPU memory and bring one layer at a time.
