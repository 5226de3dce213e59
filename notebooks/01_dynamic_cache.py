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
# # 01 · DynamicCache: growing layer by layer, and stopping at a window
#
# **Learning goal.** Read a `DynamicCache` layer by layer; see that full-attention layers grow by one token per
# step while sliding-window and chunked-attention layers stop at their window and start evicting; tell apart the
# tokens a layer keeps *live* from the *storage* it still holds; know when the prefill is the memory peak of a
# sliding model, and what `crop` does to a chunked layer.
#
# **In kvlab's words.** `DynamicCache` is transformers' default: it allocates nothing up front and, at every
# step, concatenates the new token's keys and values onto each layer. What a layer keeps depends on its kind.
# A *full* layer keeps everything. A *sliding* layer (Gemma 3: 5 of every 6 layers, window 512) only lets a token
# attend to the last 512 positions, so older keys are useless and the layer drops them. A *chunked* layer
# (Llama 4) attends within fixed chunks, and transformers caches it the same way. The guide's section
# "Cache padrão" says exactly this in one note: such layers stop growing at the window or chunk size. Here we
# watch it happen with `kvlab.watch`, which records every layer update into a `Trace`.

# %%
# %matplotlib inline
import warnings

import ipywidgets as widgets
import torch
import transformers
from transformers import DynamicCache

import kvlab
from kvlab.i18n import layer_kind_label, number
from kvlab.live import live
from kvlab.measure import formula, text
from kvlab.measure.layer_lengths import layer_lengths
from kvlab.plots import growth, occupancy
from kvlab.plots.layer_lengths import plot_layer_lengths
from kvlab.predictions import score

warnings.filterwarnings("ignore", message=".*past_key_values.*deprecated")  # transformers 5.24 spells it `cache=`
torch.manual_seed(0)
transformers.logging.disable_progress_bar()
smollm2, smollm2_tokenizer = kvlab.load("smollm2")  # 30 full-attention layers
gemma, gemma_tokenizer = kvlab.load("gemma3")  # 18 layers: [sliding × 5, full] × 3, window 512

# %% [markdown]
# ## 1. The default cache on a model of full layers (Cache padrão)
#
# **Predict first.** After a 40-token prompt and 8 generated tokens, how many tokens does each of SmolLM2's
# 30 layers hold? Do any two layers differ (`True` or `False`)?

# %%
guess_tokens = None  # tokens each SmolLM2 layer holds after 40 + 8: your guess
guess_layers_differ = None  # do any two layers hold different numbers of tokens? True or False: your guess

# %% [markdown]
# The guide's call: build a `DynamicCache` from the model's config and pass it to `generate`.

# %%
# NBVAL_CHECK_OUTPUT
smollm2_prompt = text.prompt_ids(smollm2_tokenizer, 40)  # (1, 40): the first 40 tokens of Python's manual
past_key_values = DynamicCache(config=smollm2.config)
smollm2.generate(input_ids=smollm2_prompt, attention_mask=torch.ones_like(smollm2_prompt), do_sample=False,
                 max_new_tokens=8, min_new_tokens=8, past_key_values=past_key_values)
lengths = [layer.get_seq_length() for layer in past_key_values.layers]
display(score(guess_tokens, lengths[0], unit=" tokens", kind="count", label="tokens:"))
display(score(guess_layers_differ, len(set(lengths)) > 1, kind="choice", label="layers differ:"))

# %%
# NBVAL_CHECK_OUTPUT
print("tokens per layer:", sorted(set(lengths)), "in", len(past_key_values.layers), "layers")

# %% [markdown]
# The same code inside `kvlab.watch`; the trace gives each layer's length and bytes, step by step.

# %%
# NBVAL_CHECK_OUTPUT
with kvlab.watch(smollm2) as watch:
    past_key_values = DynamicCache(config=smollm2.config)
    smollm2.generate(input_ids=smollm2_prompt, attention_mask=torch.ones_like(smollm2_prompt), do_sample=False,
                     max_new_tokens=8, min_new_tokens=8, past_key_values=past_key_values)
table = watch.trace.layer_table()
print("tokens per layer:", sorted({row["logical_length"] for row in table}), "in", len(table), "layers")
print("bytes per layer: ", ", ".join(number(b) for b in sorted({row["bytes_held"] for row in table})))
print("steps:", watch.trace.summary()["steps"], "(the prefill, then one per new token but the last)")

# %% [markdown]
# Every layer holds the same 47 tokens (40 + 8 − 1: the last token is returned, never fed back). A model of full
# layers grows uniformly, so its memory is `tokens × bytes per token` and nothing else to know.
#
# ## 2. Sliding layers stop growing: Gemma 3 past its 512-token window (Cache padrão)
#
# Gemma 3 270M has 18 layers: `[sliding × 5, full] × 3`, window 512, one KV head of 256. We give it a prompt of
# 520 tokens of the reference text (longer than the window) and generate 24 more, with the same guide code.
#
# **Predict first.** At the end, how many tokens' keys does a sliding layer keep (the length of its keys
# tensor), and a full layer?

# %%
guess_sliding = None  # tokens in a sliding layer's keys after 520 + 24: your guess
guess_full = None  # tokens in a full layer's keys: your guess

# %%
gemma_prompt = text.prompt_ids(gemma_tokenizer, 520)  # (1, 520)
with kvlab.watch(gemma) as watch:
    past_key_values = DynamicCache(config=gemma.config)
    gemma.generate(input_ids=gemma_prompt, attention_mask=torch.ones_like(gemma_prompt), do_sample=False,
                   max_new_tokens=24, min_new_tokens=24, past_key_values=past_key_values)
trace = watch.trace

# %% [markdown]
# First what transformers itself reports (after the block, `past_key_values` is a plain `DynamicCache` again):
# each layer's class, `get_seq_length()` (tokens seen) and the length of its keys tensor (tokens kept).

# %%
# NBVAL_CHECK_OUTPUT
sliding_keys, full_keys = past_key_values.layers[4].keys.shape[-2], past_key_values.layers[5].keys.shape[-2]
display(score(guess_sliding, sliding_keys, unit=" tokens", kind="count", label="sliding:"))
display(score(guess_full, full_keys, unit=" tokens", kind="count", label="full:"))

# %%
# NBVAL_CHECK_OUTPUT
classes = [type(layer).__name__ for layer in past_key_values.layers]
print({name: classes.count(name) for name in dict.fromkeys(classes)}, "window", gemma.config.sliding_window)
for i in (4, 5, 6):
    layer = past_key_values.layers[i]
    print(f"layer {i}: {classes[i]:>25}  get_seq_length() {layer.get_seq_length()}  keys {tuple(layer.keys.shape)}")

# %% [markdown]
# And the trace of the same run, with kvlab's counts per layer:

# %%
# NBVAL_CHECK_OUTPUT
kinds = [row["layer_kind"] for row in trace.layer_table()]
print({layer_kind_label(kind): kinds.count(kind) for kind in dict.fromkeys(kinds)})
for row in trace.layer_table()[4:7]:
    print(f"layer {row['layer_idx']:2d} {layer_kind_label(row['layer_kind']):>7}: seen {row['logical_length']}, live {row['slots_live']}, "
          f"evicted {row['tokens_evicted']}, {number(row['bytes_held'])} bytes")

# %% [markdown]
# The sliding layer has seen all 543 tokens but keeps 511; the full layer keeps all 543. The 511 is in
# transformers' source: `DynamicSlidingWindowLayer.update` (`transformers/cache_utils.py`) concatenates the kept
# keys with the new token's, hands attention that whole tensor (511 + 1 = the 512-token window), and keeps
# only its last `sliding_window - 1` tokens as a slice of it. That is why the layer's 1,048,576 bytes are 512
# tokens' worth (2,048 bytes per token per layer, printed below): the kept 511 are a view into the 512-token
# tensor, and kvlab counts the allocation, not the view.
#
# ### Live tokens and storage after the prefill
#
# The same distinction matters most right after the prefill. Two numbers per layer, both printed below:
# **live** tokens (what attention can still read from the cache: the heatmap further down plots these) and
# **storage** (the bytes the layer's tensors keep allocated, divided by 2,048 bytes per token).

# %%
# NBVAL_CHECK_OUTPUT
per_token = formula.bytes_per_token_per_layer(gemma.config, torch.float32)  # 2 × 1 head × 256 × 4 bytes
print(f"one token in one layer: {number(per_token)} bytes")
for step in (0, 1, trace.summary()["steps"] - 1):
    sliding, full = layer_lengths(trace, per_token, step=step)[4:6]
    print(f"step {step:2d}: sliding layer 4: seen {sliding.seen}, live {sliding.live}, storage {sliding.slots_stored} "
          f"tokens | full layer 5: seen {full.seen}, live {full.live}, storage {full.slots_stored} tokens")

# %% [markdown]
# After the prefill (step 0) a sliding layer keeps 511 tokens **live** but 520 tokens of **storage**: the 511 are
# a view into the 520-token tensor of keys that attention needed in that forward, so the whole tensor stays
# allocated. At step 1 the layer concatenates its 511 with the new token into a fresh 512-token tensor and the
# 520-token one is freed; from then on it holds 512 tokens of storage, 511 of them live.

# %%
occupancy.plot_occupancy(trace, title="Gemma 3, DynamicCache: live slots and evictions per layer (520-token prompt)")

# %% [markdown]
# Rows are layers, columns steps; the colour is **live** slots, and the first and last column write the count.
# Every sixth row (the full layers) climbs from 520 to 543; the sliding rows are at 511 live from the prefill on
# (their storage is 520 at step 0, then 512), while their eviction count climbs by one per step.
#
# **Predict first.** Which step holds the most bytes in the whole cache: the prefill (step 0) or the last step
# (step 23)? Count storage, not live tokens: 15 sliding and 3 full layers, with the storage printed above. Set
# `guess_peak` to `True` for the prefill, `False` for the last step.

# %%
guess_peak = None  # True if the prefill (step 0) holds the most bytes, False if the last step does: your guess

# %%
# NBVAL_CHECK_OUTPUT
summary = trace.summary()
by_step = trace.bytes_by_step()
peak_step = by_step.index(summary["peak_bytes"])
display(score(guess_peak, peak_step == 0, kind="choice", label="the prefill holds the most:"))

# %%
# NBVAL_CHECK_OUTPUT
print(f"prefill: {number(by_step[0])} bytes;  after step 1: {number(by_step[1])};  final: {number(by_step[-1])}")
print(f"peak: {number(summary['peak_bytes'])} bytes at step {peak_step};  "
      f"tokens evicted: {number(summary['tokens_evicted'])}")
print(f"formula, windows applied, at {trace.final_layers()[0]['logical_length']} tokens: "
      f"{number(formula.kv_bytes(gemma.config, trace.final_layers()[0]['logical_length']))} bytes")
added = by_step[2] - by_step[1]  # what one decode step adds: a token in each of the 3 full layers
passes = 1 + (by_step[0] - by_step[1]) // added + 1  # the first step whose bytes would exceed the prefill's
seen = gemma_prompt.shape[-1] + passes
print(f"each decode step adds {number(added)} bytes; the first step to hold more than the prefill: step {passes}, "
      f"with {seen} tokens seen")
types = gemma.config.layer_types
per_full_layer = types.count("sliding_attention") // types.count("full_attention")  # sliding layers per full one: 5
longest = 32_000  # a prompt near Gemma 3's context
print(f"after a {number(longest)}-token prompt the prefill stays the peak for "
      f"{number(per_full_layer * (longest - gemma.config.sliding_window))} decode steps; "
      f"the context holds {number(gemma.config.max_position_embeddings)} tokens")

# %%
growth.plot_growth(trace, expected=formula.expected_curves(gemma.config, 560), zoom=True,
                   title="Gemma 3 DynamicCache: bytes against tokens (dotted: formula from 0 tokens)")

# %% [markdown]
# The dotted curves show what the formula predicts from the first token on: the sliding part ramps up to the window and
# then stays flat, while the full part (only 3 layers) keeps its slope; the measured lines (from 520 tokens on) sit on
# them from the first decode step on. The one surprise is the **prefill**, too small for the main axes and drawn in the
# inset, which zooms on the measured total: the sliding layers' storage holds all 520 prompt tokens until the first
# decode step trims it to 512, so the total drops after step 0 and the peak is at step 0, although 23 more tokens arrive
# later. That holds only for a short generation: each decode step adds one token to each of the 3 full layers (the 6,144
# bytes printed above), and the first step to hold more than the prefill would be step 41, with 561 tokens seen (printed
# on the same line), so a `generate` call of 42 or more new tokens after this prompt peaks at its last step. In general
# the prefill holds (prompt − 512) extra tokens in each of the 15 sliding layers, and the 3 full layers catch up at 3
# tokens a step: the prefill is the peak for the first 5 × (prompt − 512) decode steps (40 here, where step 40 only ties
# it), and the generation sets the peak after that. The longer the prompt, the longer the prefill stays the peak: after
# a 32,000-token prompt it stays the peak for 157,440 decode steps (the last printed line), far past Gemma 3's
# 32,768-token context, so there the prompt alone sets the peak.
#
# ### Try it: a prompt crossing the window
#
# **Predict first.** A single prefill of 576 tokens (a bare forward, as the guide's prefix-cache sample does,
# with a `DynamicCache` passed in): how many tokens stay *live* in a sliding layer?

# %%
guess = None  # live tokens in a sliding layer after a 576-token prefill: your guess

# %% [markdown]
# Move `prompt tokens`: the cell runs one forward of that many tokens inside `kvlab.watch` and draws, per layer,
# tokens seen (outline), storage (pale) and live (solid), with the window dashed. Below 512 every bar agrees;
# past it the sliding layers' live bars stop at 511 while seen and storage follow the prompt.

# %%
measured_lengths = {}


def gemma_prefill(prompt_tokens):
    ids = text.prompt_ids(gemma_tokenizer, prompt_tokens)  # (1, prompt_tokens)
    with torch.no_grad(), kvlab.watch(gemma) as watch:
        past_key_values = DynamicCache(config=gemma.config)
        gemma(input_ids=ids, past_key_values=past_key_values)
    bytes_per_token = formula.bytes_per_token_per_layer(gemma.config, torch.float32)  # one token, one layer
    measured_lengths[prompt_tokens] = layer_lengths(watch.trace, bytes_per_token)
    return plot_layer_lengths(measured_lengths[prompt_tokens], window=gemma.config.sliding_window,
                              title=f"Gemma 3 after a {prompt_tokens}-token prefill: tokens per layer")


live(gemma_prefill, prompt_tokens=widgets.IntSlider(value=576, min=256, max=768, step=64, continuous_update=False,
                                                    description="prompt tokens"))

# %%
# NBVAL_CHECK_OUTPUT
sliding = measured_lengths[576][0]
display(score(guess, sliding.live, unit=" tokens", kind="count"))

# %%
# NBVAL_CHECK_OUTPUT
print(f"sliding layer 0 after 576 tokens: seen {sliding.seen}, live {sliding.live}, storage {sliding.slots_stored}")

# %% [markdown]
# ## 3. Chunked attention layers, Llama 4 style (Cache padrão)
#
# The guide's note names a second kind of capped layer: chunked attention (Llama 4). A chunked layer splits the
# sequence into fixed chunks and lets a token attend only within its own chunk. No bundled model has one, so we
# build a tiny random-weight Llama 4 (`kvlab.tiny_model("tiny-llama4")`: 4 layers, the first 3 chunked with
# chunks of 8 tokens, the last full). Its text is noise; its cache structure is real transformers code.
#
# **Predict first.** A 13-token prompt and 10 new tokens: how many tokens' keys does a chunked layer keep?

# %%
guess = None  # tokens in a chunked layer's keys after 13 + 10: your guess

# %%
# NBVAL_CHECK_OUTPUT
tiny = kvlab.tiny_model("tiny-llama4")
tiny_prompt = torch.randint(3, 128, (1, 13), generator=torch.Generator().manual_seed(0))  # (1, 13) random ids
print(tiny.config.layer_types, "attention_chunk_size", tiny.config.attention_chunk_size)
past_key_values = DynamicCache(config=tiny.config)
tiny.generate(input_ids=tiny_prompt, attention_mask=torch.ones_like(tiny_prompt), do_sample=False,
              max_new_tokens=10, min_new_tokens=10, past_key_values=past_key_values)
display(score(guess, past_key_values.layers[0].keys.shape[-2], unit=" tokens", kind="count"))

# %%
# NBVAL_CHECK_OUTPUT
for i, layer in enumerate(past_key_values.layers):
    print(f"layer {i}: {type(layer).__name__:>25}  sliding_window {getattr(layer, 'sliding_window', '-')!s:>2}  "
          f"get_seq_length() {layer.get_seq_length()}  keys {tuple(layer.keys.shape)}")

# %% [markdown]
# transformers builds a chunked layer as a `DynamicSlidingWindowLayer` whose window is `attention_chunk_size`
# (`transformers/cache_utils.py` maps `"chunked_attention"` to `DynamicSlidingWindowLayer`, with the comment
# that from a cache point of view sliding and chunked layers behave the same and only the mask differs). So the
# chunked layers have seen all 22 tokens and keep the last 7, like a sliding layer of window 8, while the full
# layer keeps all 22. The same run inside `kvlab.watch`:

# %%
# NBVAL_CHECK_OUTPUT
with kvlab.watch(tiny) as watch:
    past_key_values = DynamicCache(config=tiny.config)
    tiny.generate(input_ids=tiny_prompt, attention_mask=torch.ones_like(tiny_prompt), do_sample=False,
                  max_new_tokens=10, min_new_tokens=10, past_key_values=past_key_values)
tiny_per_token = formula.bytes_per_token_per_layer(tiny.config, torch.float32)
tiny_lengths = layer_lengths(watch.trace, tiny_per_token)
for length in tiny_lengths:
    print(f"layer {length.layer_idx} {layer_kind_label(length.layer_kind):>7}: seen {length.seen}, live {length.live}, "
          f"storage {length.slots_stored}")
print(f"tokens evicted: {watch.trace.summary()['tokens_evicted']} (3 chunked layers × (22 − 7))")

# %%
plot_layer_lengths(tiny_lengths, window=tiny.config.attention_chunk_size, window_label="attention_chunk_size",
                   title="tiny Llama 4: chunked layers cap at chunk − 1, the full layer grows")

# %% [markdown]
# ### What `crop` does to a chunked layer
#
# `crop(-n)` rolls the last `n` tokens back ([07](07_crop_and_rollback.ipynb) covers it). A chunked layer is a
# sliding one for the cache, so it follows the same rule: once it has seen a full chunk's worth of tokens, the
# keys a crop would have to bring back are gone, and transformers refuses. Here is its error on the cache above
# (a plain `DynamicCache` again after the watch block):

# %% tags=["raises-exception"]
past_key_values.crop(-3)

# %% [markdown]
# Two ways a crop does work. Before the layers have seen 8 tokens, a chunked layer still holds everything and
# crops like a full one. And with `activate_past_recording()` called before generating, the chunked layers keep
# their past until a crop, which rolls back and then trims them to 7 again.

# %%
# NBVAL_CHECK_OUTPUT
short = tiny_prompt[:, :4]  # (1, 4): 4 + 3 new − 1 = 6 tokens seen, under the chunk of 8
past_key_values = DynamicCache(config=tiny.config)
tiny.generate(input_ids=short, attention_mask=torch.ones_like(short), do_sample=False, max_new_tokens=3,
              min_new_tokens=3, past_key_values=past_key_values)
past_key_values.crop(-3)
print("short run, crop(-3):", [layer.get_seq_length() for layer in past_key_values.layers], "tokens seen per layer")

past_key_values = DynamicCache(config=tiny.config)
past_key_values.activate_past_recording()
tiny.generate(input_ids=tiny_prompt, attention_mask=torch.ones_like(tiny_prompt), do_sample=False,
              max_new_tokens=10, min_new_tokens=10, past_key_values=past_key_values)
print("recording, before crop: keys", [layer.keys.shape[-2] for layer in past_key_values.layers])
past_key_values.crop(-3)
print("recording, after crop(-3): seen", [layer.get_seq_length() for layer in past_key_values.layers],
      "keys", [layer.keys.shape[-2] for layer in past_key_values.layers])

# %% [markdown]
# While recording, the chunked layers held all 22 tokens (no cap at all until a crop); `crop(-3)` took the
# sequence back to 19 and trimmed the chunked layers to 7 again. Past recording trades the cap for the
# ability to roll back, so a chunked layer that records grows like a full one between crops.
#
# ## Takeaway
#
# - `DynamicCache(config=model.config)` passed to `generate` is the default cache made visible: every full layer
#   grows by one token per step, and its bytes match the formula exactly.
# - Sliding layers keep `window − 1` live tokens and evict the rest; on Gemma 3 past 512 tokens, 15 of 18 layers
#   stop growing, so memory grows at 3/18 of the full-attention rate.
# - Live is not storage: right after a prefill of N > 512 tokens a sliding layer has 511 live tokens but still
#   holds N tokens of storage until the first decode step frees it, so the prefill is the memory peak for the first
#   5 × (N − 512) decode steps (it was here, 520 + 24: step 0); a longer generation peaks at its last step.
# - Chunked layers (Llama 4) are cached by transformers exactly like sliding ones, with the chunk size as the
#   window: they cap at `chunk − 1`, and `crop` past a full chunk needs `activate_past_recording()`.
#
# **Next:** [02 · StaticCache](02_static_cache.ipynb): allocate everything up front, pay for empty slots, and
# let `torch.compile` see fixed shapes.
