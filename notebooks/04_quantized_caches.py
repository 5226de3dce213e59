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
# **Learning goal.** Turn on a quantized cache the way the guide does (`cache_implementation="quantized"` plus a
# `cache_config` dict, for the hqq, quanto and fp8 backends), know how a `QuantizedCache` splits its memory
# between packed low-bit data and a full-precision residual, time each decode step to see whether a flush shows,
# measure what each backend and bit width does to the model's predictions, and know why Gemma 3 is refused.
#
# **In kvlab's words.** transformers' `QuantizedCache` is, in its docstring's words, "similar to" KIVI (Liu et
# al., arXiv:2402.02750): the newest `residual_length` tokens stay in full precision, and everything older is
# packed to `nbits` per number in groups of `q_group_size` with a scale and offset per group (128 and 64 by
# default: the defaults of `QuantizedLayer.__init__`, `transformers/cache_utils.py`). The prompt is packed as
# soon as it is prefilled; later tokens wait in the residual, and when it is full it is packed and appended (a
# *flush*).
#
# Backends, with the bit widths each layer class of that file accepts: **hqq** (`HQQQuantizedLayer`: 1, 2, 3, 4
# or 8 bits), **quanto** (`QuantoQuantizedLayer`: 2 or 4 bits) and **fp8** (`Fp8QuantizedLayer`: every token
# cast to 8-bit floats at once, one scale per tensor, no groups, no residual). On the first call, the prefill,
# `QuantizedLayer.update` and `Fp8QuantizedLayer.update` return the keys and values as they came, so the
# prefill attends in full precision; the quantized copy is what every *later* step reads.
#
# Everything runs SmolLM2-135M-Instruct (30 layers, 3 KV heads × 64, float32) on the CPU, greedy.

# %%
# %matplotlib inline
import inspect
import os
import sys
import warnings

import ipywidgets as widgets
import torch
import transformers
from IPython.display import Markdown
from transformers import DynamicCache, GenerationConfig, masking_utils

import kvlab
from kvlab.caches.quantized import hqq_sequence_padding
from kvlab.i18n import number
from kvlab.live import live
from kvlab.measure import quality, step_times, text
from kvlab.measure.formula import kv_bytes_per_token
from kvlab.measure.timing import compare
from kvlab.plots import quantized
from kvlab.plots.step_times import plot_step_times
from kvlab.predictions import score

warnings.filterwarnings("ignore", message=".*falling back to its reference PyTorch implementation.*")
warnings.filterwarnings("ignore", message=".*past_key_values.*deprecated")  # transformers 5.24 spells it `cache=`
torch.manual_seed(0)
transformers.logging.disable_progress_bar()
model, tokenizer = kvlab.load("smollm2")
QUICK = os.environ.get("KVLAB_QUICK") == "1"  # shrinks the timed runs for CI; checked outputs hold either way

# %% [markdown]
# ## 1. Turning it on (Cache quantizado)
#
# The guide's prompt, and first what the default cache (a `DynamicCache`) generates from it, to compare with.

# %%
# NBVAL_CHECK_OUTPUT
inputs = tokenizer("I like rock music because", return_tensors="pt")
print(inputs["input_ids"].shape[-1], "prompt tokens")
out = model.generate(**inputs, do_sample=False, max_new_tokens=20)
print(tokenizer.batch_decode(out, skip_special_tokens=True)[0])

# %% [markdown]
# The guide recommends `axis_key=1` and `axis_value=1` for hqq. On this prompt, plain transformers fails:

# %% tags=["raises-exception"]
# NBVAL_CHECK_OUTPUT
out = model.generate(
    **inputs,
    do_sample=False,
    max_new_tokens=20,
    cache_implementation="quantized",
    cache_config={"nbits": 4, "backend": "hqq", "axis_key": 1, "axis_value": 1},
)

# %% [markdown]
# Why: the prompt is packed right after the prefill. Its keys are `(1 batch, 3 heads, 5 tokens, 64)` = 960
# numbers, 15 groups of 64. At axis 1 hqq lays the groups out as rows (`W.reshape([-1, group_size])` in
# `Quantizer.quantize`, `hqq/core/quantize.py`) and, at 4 bits, packs two rows into each byte row by pairing
# the first half of the rows with the second half (`(W_q[:_step] << 4) | W_q[_step:]` with
# `_step = int(len(W_q) / 2)`, in `BitPack.pack_4bit_u8`, `hqq/core/bitpack.py`, hqq 0.2.8). 15 rows split
# into 7 and 8, and the pairing fails: that is the `7` against `8` in the error. Any prompt whose group count
# is odd fails at 4 bits. The guide's model, Llama-2-7b-chat-hf, has 32 key-value heads of 128 numbers, 64
# groups per token, so its group count is always even (source: its `config.json` on the Hugging Face Hub,
# `hidden_size` 4096 over 32 attention heads, `num_key_value_heads` 32). kvlab's hqq layers pad the sequence
# with zero tokens until it packs, and remember the true length. How many it pads here:

# %%
# NBVAL_CHECK_OUTPUT
print("zero tokens kvlab adds to a 5-token prompt:",
      hqq_sequence_padding((1, 3, 5, 64), q_group_size=64, nbits=4, axis=1))
print("... and to a 6-token prompt:", hqq_sequence_padding((1, 3, 6, 64), q_group_size=64, nbits=4, axis=1))

# %% [markdown]
# For quanto the guide recommends axis 0, which is also transformers' default for both axes (`axis_key=0`,
# `axis_value=0` in `QuantizedLayer.__init__`, `transformers/cache_utils.py`):

# %%
# NBVAL_CHECK_OUTPUT
out = model.generate(
    **inputs,
    do_sample=False,
    max_new_tokens=20,
    cache_implementation="quantized",
    cache_config={"nbits": 4, "backend": "quanto", "axis_key": 0, "axis_value": 0},
)
print(tokenizer.batch_decode(out, skip_special_tokens=True)[0])

# %% [markdown]
# The guide's other road to the same cache is a `GenerationConfig` that carries both fields, passed as
# `generation_config=`. The guide also names quanto the default backend: with no `"backend"` key, `generate`
# picks quanto (`cache_config.pop("backend", "quanto")` in `generation/utils.py`, source: transformers 5.25). The
# cell leaves the key out and prints the class of the layers `generate` built:

# %%
# NBVAL_CHECK_OUTPUT
generation_config = GenerationConfig(
    do_sample=False,
    max_new_tokens=20,
    cache_implementation="quantized",
    cache_config={"nbits": 4, "axis_key": 0, "axis_value": 0},  # no "backend": transformers' default
)
out = model.generate(**inputs, generation_config=generation_config, return_dict_in_generate=True)
print(tokenizer.batch_decode(out.sequences, skip_special_tokens=True)[0])
print("layers built:", type(out.past_key_values.layers[0]).__name__)

# %% [markdown]
# fp8 needs no extra package and takes only the backend:

# %%
# NBVAL_CHECK_OUTPUT
out = model.generate(**inputs, do_sample=False, max_new_tokens=20, cache_implementation="quantized",
                     cache_config={"backend": "fp8"})
print(tokenizer.batch_decode(out, skip_special_tokens=True)[0])

# %% [markdown]
# fp8 casts each whole tensor (one scale per tensor, not per group), so it has no use for `nbits`, the axes,
# `q_group_size` or `residual_length`, and transformers refuses them rather than ignore them:

# %% tags=["raises-exception"]
# NBVAL_CHECK_OUTPUT
model.generate(**inputs, do_sample=False, max_new_tokens=20, cache_implementation="quantized",
               cache_config={"backend": "fp8", "nbits": 4})

# %% [markdown]
# ## 2. The same calls under `kvlab.watch`
#
# The hqq, quanto and fp8 `generate` calls again, unchanged, inside one `kvlab.watch` block: one trace per cache.
#
# **Predict first.** After 20 new tokens the cache holds 24 tokens (the 20th new token is never fed back). With
# the default `residual_length=128`, how many of them does the 4-bit hqq cache hold packed, and how many wait in
# full precision?

# %%
guess_packed = None  # tokens packed: your guess
guess_residual = None  # tokens in the full-precision residual: your guess

# %%
CONFIGS_SHOWN = {
    "hqq 4-bit, axis 1": {"nbits": 4, "backend": "hqq", "axis_key": 1, "axis_value": 1},
    "quanto 4-bit, axis 0": {"nbits": 4, "backend": "quanto", "axis_key": 0, "axis_value": 0},
    "fp8": {"backend": "fp8"},
}
texts = {}
with kvlab.watch(model) as watch:
    for label, cache_config in CONFIGS_SHOWN.items():
        out = model.generate(**inputs, do_sample=False, max_new_tokens=20, cache_implementation="quantized",
                             cache_config=cache_config)
        texts[label] = tokenizer.batch_decode(out, skip_special_tokens=True)[0]
    out = model.generate(**inputs, do_sample=False, max_new_tokens=20)  # the default DynamicCache
    texts["DynamicCache"] = tokenizer.batch_decode(out, skip_special_tokens=True)[0]

# %%
# NBVAL_CHECK_OUTPUT
hqq_layer = watch.traces[0].final_layers()[0]  # "hqq 4-bit, axis 1", layer 0 (every layer holds the same tokens)
display(score(guess_packed, hqq_layer["quantized_tokens"], unit=" tokens", kind="count"))
display(score(guess_residual, hqq_layer["residual_tokens"], unit=" tokens", kind="count"))

# %%
# NBVAL_CHECK_OUTPUT
print(len(watch.traces), "caches seen")
print(f"{'cache':>22} {'packed tok':>10} {'residual tok':>12} {'packed B':>9} {'residual B':>10} {'total B':>9}")
for label, trace in zip(texts, watch.traces):
    layers = trace.final_layers()
    print(f"{label:>22} {layers[0]['quantized_tokens']:>10} {layers[0]['residual_tokens']:>12} "
          f"{number(sum(e['packed_bytes'] for e in layers)):>9} {number(sum(e['residual_bytes'] for e in layers)):>10} "
          f"{number(trace.summary()['final_bytes']):>9}")
print()
for label, generated in texts.items():
    print(f"{label:>22}: {generated}")

# %% [markdown]
# hqq at axis 1 runs under the watch (kvlab pads), and its text parts from the DynamicCache's after "it's a way
# to connect with"; quanto's text is the DynamicCache's, and the quanto and fp8 texts are the ones the plain
# calls printed above. Both group-wise backends pack the 5 prompt tokens and keep the 19 decoded ones in the
# float32 residual, so at this length their caches are mostly residual and only about a sixth smaller than the
# DynamicCache (918,720 and 913,440 B against 1,105,920 B). fp8 has no residual: all 24 tokens are stored in one
# byte per number plus one scale per tensor (276,720 B), a quarter of the float32 cache from the first token.

# %% [markdown]
# ## 3. Where the bytes go once the packed part dominates
#
# 24 tokens say little about compression. Here each backend runs over 280 tokens of real English (the prose of
# Python's reference manual, shipped with Python): a 256-token prefill, packed at once, then the next 23 tokens
# fed to the model (teacher forcing), so that 24 predictions are scored: the one after the prefill and one per
# token fed. At the end the cache holds 279 tokens: 256 packed, 23 in the residual. hqq runs at the guide's
# axis 1, quanto at axis 0 (hqq also takes 1 and 3 bits: try them in the live control below).

# %% [markdown]
# How it runs: `kvlab.measure.quality.sweep(..., chunked=True)` builds kvlab's instrumented `QuantizedCache`
# from the same options as each `cache_config` and feeds the 23 tokens in one forward instead of 23 decode
# steps. It predicts the same: attention is causal, so each of those tokens reads the packed prefill
# dequantized, as a decode step would, and the tokens before it in full precision, as the residual would hold
# them (23 tokens stay under the 128-token residual, so no flush happens part-way; kvlab's tests check this
# against token-by-token decoding).
#
# **Predict first.** What percentage of the 4-bit hqq cache's bytes is the 23-token full-precision residual?

# %%
guess = None  # % of the whole cache's bytes: your guess

# %%
SWEEP = {
    "hqq 2-bit": {"backend": "hqq", "nbits": 2, "axis_key": 1, "axis_value": 1},
    "hqq 4-bit": {"backend": "hqq", "nbits": 4, "axis_key": 1, "axis_value": 1},
    "hqq 8-bit": {"backend": "hqq", "nbits": 8, "axis_key": 1, "axis_value": 1},
    "quanto 2-bit": {"backend": "quanto", "nbits": 2, "axis_key": 0, "axis_value": 0},
    "quanto 4-bit": {"backend": "quanto", "nbits": 4, "axis_key": 0, "axis_value": 0},
    "fp8": {"backend": "fp8"},
}
ids = text.prompt_ids(tokenizer, 280)  # (1, 280): prefill 256, then 23 tokens fed, 24 predictions scored
print(f"Python {sys.version.split()[0]} (the text comes from its pydoc_data)")
rows, runs = quality.sweep(model, ids, prefill_tokens=256, configs=SWEEP, chunked=True, reference_label="DynamicCache")

# %%
# NBVAL_CHECK_OUTPUT
print(f"{'config':>13} {'packed':>10} {'residual':>10} {'total':>10} {'vs 16-bit':>9} {'packed vs 16-bit':>17}")
for r in rows:
    print(f"{r['config']:>13} {number(r['packed_bytes']):>10} {number(r['residual_bytes']):>10} "
          f"{number(r['cache_bytes']):>10} {number(r['memory_ratio_16bit'], 3):>9} "
          f"{number(r['packed_ratio_16bit'], 3):>17}")
residual_tokens = ids.shape[-1] - 256 - 1  # the tokens fed after the prefill (the last one is only predicted)
per_token = kv_bytes_per_token(model.config, torch.float32)  # 30 layers × keys and values × 3 heads × 64 × 4 B
print(f"residual: {residual_tokens} tokens × {number(per_token)} B = {number(residual_tokens * per_token)} B")
hqq4 = next(r for r in rows if r["config"] == "hqq 4-bit")
display(score(guess, round(100 * hqq4["residual_bytes"] / hqq4["cache_bytes"], 1), unit="%", kind="share"))

# %%
quantized.plot_configs({r["config"]: runs[r["config"]].trace for r in rows[1:]}, reference_bytes=rows[0]["cache_bytes"],
                       title="SmolLM2 at 279 tokens (256 packed): packed vs full-precision residual bytes")

# %% [markdown]
# Every group-wise configuration carries the same residual: 23 tokens × 46,080 B (30 layers × keys and values ×
# 3 heads × 64 numbers × 4 bytes) = 1,059,840 B. In the 4-bit hqq cache that is 36.5% of its 2,903,040 B, so
# the whole cache is 0.452 of a 16-bit cache of the same tokens, far from the 0.25 that 4 of 16 bits suggest;
# at 2 bits the residual is almost half the cache (1,059,840 of 2,165,760 B). The DynamicCache reads 2.000
# because it stores float32, twice a 16-bit cache.

# %% [markdown]
# The packed part alone (last column) is the ratio a sequence much longer than the residual approaches. It
# costs nbits + 1 bits per number: each group of 64 numbers adds a float32 scale and offset, 64 bits, one per
# number (so 3/16, 5/16 and 9/16: the column's 0.188, 0.312 and 0.562). hqq and quanto pack to the same bytes at
# the same bit width. fp8 has no residual: half a 16-bit cache (plus one scale per tensor), at any length.

# %% [markdown]
# ## 4. The residual over time (live)
#
# **Predict first.** quanto 4-bit with `residual_length=8`, 32 new tokens after the guide's prompt: draw its
# residual bytes against tokens in your head. Do they only grow (a "ramp"), or grow and then drop back (a
# "saw")? Answer with one of the two quoted words.

# %%
guess = None  # one of the two quoted words of the question: your guess

# %% [markdown]
# The control below runs the guide's call (`cache_implementation="quantized"` with the `cache_config` you pick)
# inside `kvlab.watch` for 32 new tokens after the guide's prompt, and compares its greedy tokens with the
# DynamicCache's. hqq runs at axis 1 and quanto at axis 0, as the guide recommends; fp8 takes only the backend.
# quanto accepts 2 or 4 bits, hqq 1, 2, 3, 4 or 8: other choices show transformers' own error. It opens at the
# prediction's settings: look at the figure after you have guessed.

# %%
LIVE_NEW_TOKENS = 32
prompt_length = inputs["input_ids"].shape[-1]
with kvlab.watch(model) as reference_watch:
    reference = model.generate(**inputs, do_sample=False, max_new_tokens=LIVE_NEW_TOKENS,
                               min_new_tokens=LIVE_NEW_TOKENS)
reference_tokens = reference[0, prompt_length:].tolist()


def quantized_split(backend, nbits, residual_length):
    if backend == "fp8":
        cache_config = {"backend": "fp8"}  # per-tensor: refuses nbits, axes, q_group_size and residual_length
    else:
        axis = 1 if backend == "hqq" else 0  # the guide's recommended axes
        cache_config = {"backend": backend, "nbits": nbits, "axis_key": axis, "axis_value": axis,
                        "residual_length": residual_length}
    with kvlab.watch(model) as watch:
        out = model.generate(**inputs, do_sample=False, max_new_tokens=LIVE_NEW_TOKENS, min_new_tokens=LIVE_NEW_TOKENS,
                             cache_implementation="quantized", cache_config=cache_config)
    same = quality.token_agreement(reference_tokens, out[0, prompt_length:].tolist())
    if backend == "fp8":
        return quantized.plot_split(watch.trace, reference_trace=reference_watch.trace,
                                    title=f"fp8\n{same['matches']}/{same['tokens']} greedy tokens as the "
                                          f"DynamicCache's, the first {same['common_prefix']} identical")
    return quantized.plot_split(watch.trace, reference_trace=reference_watch.trace,
                                title=f"{backend} {nbits}-bit, residual_length={residual_length}\n{same['matches']}/"
                                      f"{same['tokens']} greedy tokens as the DynamicCache's, the first "
                                      f"{same['common_prefix']} identical")


live(quantized_split,
     backend=widgets.Dropdown(options=["hqq", "quanto", "fp8"], value="quanto", description="backend"),
     nbits=widgets.Dropdown(options=[1, 2, 3, 4, 8], value=4, description="nbits"),
     residual_length=widgets.IntSlider(value=8, min=8, max=64, step=8, continuous_update=False,
                                       description="residual_length"))

# %% [markdown]
# The same call at four settings of the control, counted rather than drawn: how often the residual bytes fall
# (a flush), the most they reach, and how many greedy tokens match the DynamicCache's before the first difference.

# %%
# NBVAL_CHECK_OUTPUT
def residual_shape(cache_config, label):
    """The guide's call with `cache_config`, counted: how many times the residual bytes fall (a flush)."""
    with kvlab.watch(model) as watch:
        out = model.generate(**inputs, do_sample=False, max_new_tokens=LIVE_NEW_TOKENS, min_new_tokens=LIVE_NEW_TOKENS,
                             cache_implementation="quantized", cache_config=cache_config)
    residual = [row["residual_bytes"] for row in quantized.split_by_step(watch.trace)]
    falls = sum(after < before for before, after in zip(residual, residual[1:]))
    same = quality.token_agreement(reference_tokens, out[0, prompt_length:].tolist())
    print(f"{label:>31}: residual falls {falls} times, at most {number(max(residual)):>7} B; "
          f"the first {same['common_prefix']:>2} of {same['tokens']} tokens as the DynamicCache's")
    return falls


quanto_4bit_falls = residual_shape({"backend": "quanto", "nbits": 4, "axis_key": 0, "axis_value": 0,
                                    "residual_length": 8}, label="quanto 4-bit, residual_length=8")
residual_shape({"backend": "fp8"}, label="fp8")
residual_shape({"backend": "hqq", "nbits": 2, "axis_key": 1, "axis_value": 1, "residual_length": 8},
               label="hqq 2-bit, residual_length=8")
residual_shape({"backend": "quanto", "nbits": 2, "axis_key": 0, "axis_value": 0, "residual_length": 8},
               label="quanto 2-bit, residual_length=8")
answers = dict(falls_label="saw", only_grows_label="ramp")  # the question's two words, in the reader's language
display(score(guess, answers["falls_label"] if quanto_4bit_falls else answers["only_grows_label"], kind="choice"))

# %% [markdown]
# A saw: the residual fills one token per step and empties into the packed part at each flush, while the
# DynamicCache (dashed) climbs in a straight line. The residual never holds more than 7 tokens (322,560 B =
# 7 × 46,080 B): `QuantizedLayer.update` (`transformers/cache_utils.py`) packs everything as soon as the
# residual plus the new token would reach `residual_length`, so the 8th token goes straight into the packed
# part. fp8 draws no saw: its residual never holds a byte.

# %% [markdown]
# What a short residual costs. It makes the cache smaller sooner, but more of the tokens are read back from
# their quantized copy. And a flush re-packs the whole cache inside that step's own cache update, before
# attention can read the keys: the same `QuantizedLayer.update` dequantizes the packed part, concatenates it
# with the residual and the new token, and quantizes the result again, and attention reads what it returns.
# Whether that wait is long enough to see is measured in section 5.

# %% [markdown]
# The token counts at the end of each line: at 2 bits, both backends part ways with the DynamicCache's greedy
# text after 3 tokens; quanto 4-bit after 29, and fp8 after 5 (its text already differed in section 1). Move
# the control to those settings to see each drawn.

# %% [markdown]
# ## 5. What a flush costs in time
#
# The work counters say where to look. Every decode step of a group-wise cache (hqq, quanto) dequantizes its
# whole packed part; a flush step also quantizes the whole cache again, every token so far. fp8 never flushes
# and quantizes only the new token at each step, but its scale is fixed after the prefill ("The per-tensor scale
# is frozen after the first `update`", says `Fp8QuantizedLayer`'s docstring), so it keeps every token in 8 bits
# and `Fp8QuantizedLayer.update` casts the whole cache back to float32 at every step for attention to read: it
# dequantizes more numbers than either group-wise cache. The DynamicCache does neither. So if quantizing is what
# costs, a group-wise cache's flush steps are its slow ones; if dequantizing is, fp8 is the slowest of the three.

# %% [markdown]
# The guide's calls again, each for 19 new tokens after a 6-token prompt (an even count, so hqq at axis 1
# packs without kvlab's padding: 0 zero tokens for a 6-token prompt, as printed in section 1), with
# `residual_length=6` so that three flushes happen. First under `kvlab.watch`, once, for the exact work of
# each step:

# %%
RESIDUAL, STEP_TOKENS = 6, 19
step_inputs = tokenizer("I like rock music because it", return_tensors="pt")
STEP_CONFIGS = {
    "DynamicCache": {},  # generate's default cache
    "hqq 4-bit": {"cache_implementation": "quantized",
                  "cache_config": {"backend": "hqq", "nbits": 4, "axis_key": 1, "axis_value": 1,
                                   "residual_length": RESIDUAL}},
    "quanto 4-bit": {"cache_implementation": "quantized",
                     "cache_config": {"backend": "quanto", "nbits": 4, "axis_key": 0, "axis_value": 0,
                                      "residual_length": RESIDUAL}},
    "fp8": {"cache_implementation": "quantized", "cache_config": {"backend": "fp8"}},
}
with kvlab.watch(model) as step_watch:
    for label, generate_kwargs in STEP_CONFIGS.items():
        model.generate(**step_inputs, do_sample=False, max_new_tokens=STEP_TOKENS, min_new_tokens=STEP_TOKENS,
                       **generate_kwargs)
step_traces = dict(zip(STEP_CONFIGS, step_watch.traces))

# %%
# NBVAL_CHECK_OUTPUT
print(step_inputs["input_ids"].shape[-1], "prompt tokens; steps 0 (the prefill) to", STEP_TOKENS - 1)
print(f"transformers' flush schedule for residual_length={RESIDUAL}:", step_times.flush_schedule(RESIDUAL, STEP_TOKENS))
for label, trace in step_traces.items():
    print(f"{label:>13}: flushed at steps {step_times.flush_steps(trace)}, "
          f"quantized at steps {step_times.quantize_steps(trace)}")
packing = [label for label in STEP_CONFIGS if label != "DynamicCache"]
work = {label: step_traces[label].work_by_step() for label in packing}
print("\nper step, all layers: quantize and dequantize calls / numbers")
print(("     " + "  ".join(f"{label:^29}" for label in packing)).rstrip())
print("step", end=" ")
for label in packing:  # one pair of columns per cache, two spaces between pairs
    print(f"{'quantize':>15} {'dequantize':>13}", end="\n" if label == packing[-1] else "  ")
for step in range(STEP_TOKENS):
    cells = []
    for label in packing:
        row = work[label][step]
        cells.append(f"{row['quantize_calls']:>3} / {number(row['quantized_elements']):>9} "
                     f"{row['dequantize_calls']:>3} / {number(row['dequantized_elements']):>7}")
    print(f"{step:>4} " + "  ".join(cells))
print("numbers dequantized over decode steps 1 to", STEP_TOKENS - 1, "(all layers):",
      ", ".join(f"{label} {number(sum(work[label][s]['dequantized_elements'] for s in range(1, STEP_TOKENS)))}"
                for label in packing))

# %% [markdown]
# Then timed, without the watch: `kvlab.measure.step_times.decode_step_times` runs each configuration's
# `generate` with a `DecodeClock` as its `streamer=` (a timestamp per new token; the gap between two is one
# decode step), the repeats interleaved across configurations, each with a cache of its own (`generate` builds
# a new one for every call). Printed: each configuration's time per decoded token, its ratio to the
# DynamicCache's, and, for hqq and quanto, their flush steps against their other steps.

# %%
# Not checked: times depend on the machine.
STEP_REPEATS = 1 if QUICK else 5
step_results = step_times.decode_step_times(model, step_inputs["input_ids"], STEP_CONFIGS, new_tokens=STEP_TOKENS,
                                            repeats=STEP_REPEATS, warmup=0 if QUICK else 1)
print("time per decoded token (median over repeats, IQR):")
for label, result in step_results.items():
    print(f"{label:>13}: {result.decode.describe()}")
verdicts = [compare(step_results["DynamicCache"].decode, result.decode, warn=False).verdict()
            for label, result in step_results.items() if label != "DynamicCache"]
for label in ("hqq 4-bit", "quanto 4-bit"):
    others, flushes = step_times.split_steps(step_results[label], step_times.flush_steps(step_traces[label]))
    verdicts.append(compare(others, flushes, warn=False).verdict())
print()
print("\n".join(verdicts))  # printed here, and again in the box under the figure

# %%
# Not checked: times depend on the machine.
plot_step_times(step_results, step_traces, field="quantized_elements",
                title=f"SmolLM2, residual_length={RESIDUAL}: each decode step, median of {STEP_REPEATS} "
                      f"interleaved repeats (band: IQR), flush steps circled", verdicts=verdicts)

# %% [markdown]
# What the checked table says. hqq and quanto quantize at the prefill and then only at steps 6, 12 and 18,
# each time the whole cache (60 calls: keys and values of 30 layers, every token so far). fp8 quantizes at every
# step, but only the new token (11,520 numbers), and dequantizes its whole cache at every step, the new token
# included: 80,640 numbers at step 1, 276,480 at step 18, 3,214,080 over the 18 decode steps against 2,488,320
# for hqq or quanto (the table's last line). The right panel of the figure draws the quantize work per step; the
# box under the figure repeats the verdicts printed above it.

# %% [markdown]
# fp8 first, because it is the lesson: it dequantizes more numbers than either group-wise cache, and its
# verdict against the DynamicCache prices that. "No difference beyond noise" would mean that casting the whole
# cache back to float32 at every step is lost next to a forward through 30 layers on this CPU, so the number of
# values a cache dequantizes is not what makes it slow; "slower" puts a price on it; "too noisy to tell" (too
# few repeats) says nothing either way.

# %% [markdown]
# What hqq and quanto add is the way they pack: at every step they unpack bit-packed numbers and apply each
# group's scale and offset, and at a flush they quantize the whole cache again. hqq also fits each group's
# offset there: transformers' `HQQQuantizedLayer._quantize` calls hqq's `Quantizer.quantize` without
# `optimize`, which defaults to `True` (`hqq/core/quantize.py`), and the optimiser runs up to `"iters": 20`,
# stopping once the error stops falling (`optimize_weights_proximal_legacy`, `hqq/core/optimize.py`).

# %% [markdown]
# How to read the flush verdicts. If packing is on the critical path, the circled steps stand above their
# neighbours on the hqq and quanto lines, and the last two verdicts say the flush steps are slower than the other
# steps, with an interval that excludes 1. Where a circled point sits inside the band of the steps around it, or
# the interval contains 1, this run does not show it for that backend. The steps after a flush also dequantize a
# larger packed part than the steps before it (the table's dequantize columns), a smaller, steady cost the line
# may or may not show. The first three verdicts compare the whole decode with the DynamicCache's: every step's
# dequantizing is in them, flush or not.

# %% [markdown]
# ## 6. What quantization does to the predictions
#
# Back to the 280-token run of section 3: at each of the 24 scored positions, does the quantized cache's greedy
# next token match the DynamicCache's fed the same tokens (*top-1 agreement*)? How far did the next-token
# distribution move (*KL*, nats)? How well does the model still predict the real text (*perplexity*)?
#
# **Predict first.** Of hqq 2, 4 and 8 bits, quanto 2 and 4 bits and fp8, which configuration picks the
# DynamicCache's next token at the fewest of the 24 positions?

# %%
guess = None  # one of SWEEP's names, e.g. "hqq 8-bit": your guess

# %%
# NBVAL_CHECK_OUTPUT
fewest = min(rows, key=lambda r: r["top1_agreement"])["config"]
display(score(guess, fewest, kind="choice"))

# %%
# NBVAL_CHECK_OUTPUT
positions = len(runs["DynamicCache"].targets)
for r in rows:
    print(f"{r['config']:>13}: top-1 agreement {round(r['top1_agreement'] * positions):>2}/{positions}")

# %%
# KL and perplexity (not checked: floating-point sums over 49,152-token distributions).
print(f"{'config':>13} {'KL mean':>8} {'KL max':>7} {'perplexity':>11}")
for r in rows:
    print(f"{r['config']:>13} {number(r['kl_mean'], 4):>8} {number(r['kl_max'], 3):>7} "
          f"{number(r['perplexity'], 2, grouping=False):>11}")

# %%
# Position by position (not checked: floating-point). Where each cache's greedy pick differs from the
# DynamicCache's, and how far it moved the log-probability of the real next token: the perplexity is the
# DynamicCache's times exp(-mean move).
for label in ("hqq 4-bit", "hqq 8-bit", "quanto 4-bit", "fp8"):
    by_position = quality.per_position(runs["DynamicCache"], runs[label])
    moves = [p["target_shift"] for p in by_position]
    print(f"{label:>13}: picks differ at positions {[p['position'] for p in by_position if not p['same']]}; "
          f"the real next token's log-probability moved {number(min(moves), 3)} to {number(max(moves), 3)} nats, "
          f"mean {number(sum(moves) / len(moves), 4)}")
print()
for p in quality.per_position(runs["DynamicCache"], runs["hqq 8-bit"]):
    if not p["same"]:
        first, second = (tokenizer.decode([token]) for token in p["reference_top2"])
        print(f"position {p['position']}: the DynamicCache's two likeliest tokens, {first!r} and {second!r}, are "
              f"{number(p['margin'], 4)} nats apart; hqq 8-bit picks {tokenizer.decode([p['pick']])!r}, "
              f"KL there {number(p['kl'], 5)} nats")

# %% [markdown]
# fp8 agrees at all 24 positions, hqq 8-bit at 23, hqq 4-bit and quanto 4-bit at 22 each. The cliff is between
# 4 and 2 bits: quanto 2-bit agrees at 10 positions and hqq 2-bit at 8, fewer than half. The finer measures
# (printed above, not checked because they are floating-point sums) say the same: the mean KL is about 0.01
# nats at 4 bits, 0.0001 at 8 bits and 0.0028 for fp8, and above 1 nat at 2 bits, where the perplexity of the real
# text also jumps from the DynamicCache's 15.25 to about 32 (hqq) and 51 (quanto); at 4 bits and above it stays
# within 0.1 of it.

# %% [markdown]
# hqq 8-bit reads oddly in those lines: a KL max of 0.000 (under half a thousandth of a nat everywhere), yet one
# position lost. The position-by-position lines explain it: the lost position is a near tie. There the
# DynamicCache's two likeliest tokens are 0.0111 nats apart, so a change of the cache far too small to show in
# the KL (0.00021 nats there) flips the greedy pick; hqq 4-bit and quanto 4-bit flip the same position, fp8 does
# not. Top-1 agreement counts a flipped near tie as a whole miss, and 24 positions are few (one position is 1/24
# of them): read 22 against 23 as a tie, and the 2-bit fall as the finding.

# %% [markdown]
# hqq 8-bit also has the same perplexity as hqq 4-bit, a coincidence of averaging: hqq 8-bit moves the real next
# token's log-probability by a few hundredths of a nat at most, hqq 4-bit by several tenths either way (the
# lines above print each range), and the moves average out to almost the same mean (-0.0033 and -0.0031 nats),
# which takes the DynamicCache's 15.25 to 15.30 for both.

# %% [markdown]
# The figure pairs each configuration's agreement (on an axis from 0) with the memory of the same run: the whole
# cache at 279 tokens, residual included (section 3's "vs 16-bit" column), relative to a 16-bit cache of the
# same tokens. The strip under it marks the packed part alone (section 3's "packed vs 16-bit" column), the ratio
# a much longer sequence approaches. The strip has no agreement axis: at 279 tokens the 23 newest tokens were
# still read in full precision, a long sequence would read nearly all of its tokens from their quantized copy,
# and no agreement was measured at such a length. Only kvlab's own measurements are on it.

# %%
quantized.plot_quality_vs_memory([r for r in rows if r["config"] != "DynamicCache"],
                                 title="SmolLM2, 256 packed + 23 residual tokens: top-1 agreement vs memory")

# %% [markdown]
# ### Published results (external, not measured here)
#
# These come from other models, other benchmarks and other measures of quality and of memory, so they get a
# table of their own instead of a place on the axes above:

# %%
Markdown(quantized.references_markdown())

# %% [markdown]
# The Hugging Face blog's direction matches what we measured (R1 and R2): 4-bit holds up, 2-bit is where quality
# goes. KIVI keeps quality at 2 bits where this run does not (R3), which need not contradict it. KIVI quantizes
# keys per channel and values per token (its abstract, arXiv:2402.02750), where transformers quantizes both
# per channel ("in contrast to what was described in the paper", says the `QuantizedCache` docstring), and the
# paper measures Llama-2, Falcon and Mistral models on LM-Eval's tasks and on the long-context LongBench; this
# is a 135M model with 3 KV heads, scored at 24 positions.

# %% [markdown]
# ## 7. Why Gemma 3 is refused
#
# The guide's table says the quantized cache does not support sliding-window layers. Gemma 3's sliding layers
# drop tokens older than their window; what would a quantized layer have to do that the `QuantizedCache` does
# not? Here is the guide's call on tiny-gemma3 (random weights, Gemma 3's layout of sliding and full layers at
# toy size):

# %% tags=["raises-exception"]
# NBVAL_CHECK_OUTPUT
gemma = kvlab.tiny_model("tiny-gemma3")
print(gemma.config.layer_types)
source = torch.randint(3, 128, (1, 8), generator=torch.Generator().manual_seed(0))
gemma.generate(source, attention_mask=torch.ones_like(source), do_sample=False, max_new_tokens=4,
               cache_implementation="quantized", cache_config={"backend": "quanto", "nbits": 4})

# %% [markdown]
# transformers' `QuantizedCache` builds only full-attention quantized layers: its `__init__`
# (`transformers/cache_utils.py`) raises for any layer type other than `full_attention`, the error above, and
# otherwise builds one quantized layer per hidden layer. It has no layer that evicts, and it refuses before
# generating anything (`kvlab.make_cache("quantized", ...)` refuses the same way).

# %% [markdown]
# What would a cache without evicting layers cost a sliding model: wrong attention, or memory? Which tokens a
# sliding layer attends to is decided by its mask, and transformers builds the sliding mask from the config,
# not from the cache (the first line printed below is from `create_sliding_window_causal_mask`). A
# `DynamicCache()` built without a config has the same flaw as a quantized one (a full layer for every layer,
# none evicts), so it shows what happens:

# %%
# NBVAL_CHECK_OUTPUT
print("in create_sliding_window_causal_mask:",
      next(line.strip() for line in inspect.getsource(masking_utils.create_sliding_window_causal_mask).splitlines()
           if "sliding_window = " in line))
long_source = torch.randint(3, 128, (1, 16), generator=torch.Generator().manual_seed(0))  # (1, 16): past the window
by_config = DynamicCache(config=gemma.config)  # a sliding layer for each sliding_attention layer
full_only = DynamicCache()  # no config: a full layer for every layer, as a QuantizedCache would have
generated = {}
for name, cache in (("DynamicCache(config=...)", by_config), ("DynamicCache()", full_only)):
    generated[name] = gemma.generate(long_source, attention_mask=torch.ones_like(long_source), do_sample=False,
                                     max_new_tokens=6, past_key_values=cache)
    held = [layer.keys.shape[-2] for layer in cache.layers]  # keys: (batch, kv_heads, tokens, head_dim)
    print(f"{name:>24}: tokens each layer holds {held}")
print("sliding_window:", gemma.config.sliding_window)
if torch.equal(generated["DynamicCache(config=...)"], generated["DynamicCache()"]):
    print("both caches generated the same tokens")
else:
    print("the two caches generated different tokens")

# %% [markdown]
# ## Takeaway
#
# - The guide's switch is `cache_implementation="quantized"` with a `cache_config` dict. hqq at the
#   recommended axis 1 can crash plain transformers on short odd-sized prompts (kvlab pads); fp8 takes only
#   `{"backend": "fp8"}` and refuses per-group options.
# - A quantized cache is packed data plus a full-precision residual. At 24 tokens it is nearly all residual; at
#   279 tokens the 23-token residual is still over a third of the 4-bit cache's bytes; only far past
#   `residual_length` does the packed ratio (nbits + 1 bits per number here) show. fp8 halves a 16-bit cache
#   from the first token.
# - Time: a group-wise cache dequantizes its packed part at every decode step and re-packs the whole cache at
#   each flush (every `residual_length`-th step), inside the step; fp8 dequantizes its whole cache at every
#   step, more numbers than either. Section 5's verdicts say, with intervals, whether this run shows the flush
#   steps as the slow ones and each backend's decode against the DynamicCache's; where fp8's reads no
#   difference and the flush steps read slower, the cost is in the packing, not in the count of numbers
#   dequantized.
# - Quality follows the bit width: with 256 tokens packed, fp8 and 8- and 4-bit caches pick the DynamicCache's
#   next token at 22 to 24 of 24 positions (hqq 8-bit's one miss at a near tie 0.0111 nats wide); 2-bit ones at
#   8 (hqq) and 10 (quanto).
# - Sliding-window models are refused: `QuantizedCache` has only full layers. The sliding mask comes from
#   `config.sliding_window`, so a cache without evicting layers would not attend wrongly; it would keep every
#   token in every layer, the memory a sliding layer exists to save.
#
# **Next:** [05 · Encoder-decoder and model-specific caches](05_encoder_decoder_and_model_specific.ipynb).