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
# # 07 · Crop and rollback: taking tokens back out of a cache
#
# **Learning goal.** After this notebook you can roll a cache back by *n* tokens with `past_key_values.crop(-n)`,
# say what a crop does to sliding-window layers past their window and to linear-attention layers, and what
# `activate_past_recording()` before the forward changes, roll a hybrid model's recurrent state back with
# `recurrent_states_to_keep`, say what `crop(0)` frees and when, and build the accept/reject loop of speculative
# decoding on it.
#
# **In kvlab's words.** A crop makes the cache forget its last *n* tokens. A full-attention layer just drops its
# last *n* slots. A sliding layer keeps only its last `window - 1` tokens, and a linear-attention layer (Mamba,
# Gated DeltaNet) folds every token into a fixed-size state: what a crop can do to those two is what sections 2
# and 3 ask you to predict. `activate_past_recording()` makes a sliding layer keep its past, and since
# transformers 5.25 `recurrent_states_to_keep=N` makes a linear-attention layer keep copies of its recurrent
# state; section 3 tests on a hybrid model what a crop does with those copies.
#
# SmolLM2-135M-Instruct (30 full layers), Gemma 3 270M (5 sliding : 1 full, window 512) and two tiny
# random-weight models, greedy, CPU. Each section first runs transformers' own calls, then the same calls inside
# `kvlab.watch`, which records what every layer holds.

# %%
import os
import sys
import warnings

import ipywidgets as widgets
import torch
import transformers
from transformers import DynamicCache

import kvlab
from kvlab.i18n import layer_kind_label, marks, number
from kvlab.live import live
from kvlab.measure import text, timing
from kvlab.plots._figure import subplots
from kvlab.predictions import score
from kvlab.plots.positions import plot_cached_positions, plot_holdings
from kvlab.plots.speculative import plot_speculative_steps
from kvlab.measure.linear_rollback import bytes_around_last_crop, recorded_bytes, state_match
from kvlab.measure.rollback import cached_positions, holdings, prompt_lookup_draft, speculative_generate
from kvlab.recorded_run import encode

warnings.filterwarnings("ignore", message=".*past_key_values.*deprecated")  # transformers 5.24 spells it `cache=`
transformers.logging.set_verbosity_error()  # the tiny Mamba models' "slow kernel" notices
torch.manual_seed(0)
QUICK = os.environ.get("KVLAB_QUICK") == "1"  # no untimed warm-up in the test suite; checked outputs hold either way
model, tokenizer = kvlab.load("smollm2")
print(f"Python {sys.version.split()[0]} (the Gemma prompt below is Python's own reference text)")

# %% [markdown]
# ## 1. `crop(-3)` on SmolLM2 (Recortar um cache)
#
# **Predict first.** A 6-token prompt, 8 new tokens: the cache holds 13 tokens (the 8th new token was never fed
# back). After `crop(-3)`, how many does it hold? If we then resume from the kept tokens, do the same three
# tokens come back (True or False)?

# %%
guess_kept = None  # tokens the cache holds after crop(-3): your guess
guess_same_tokens = None  # True if resuming brings back the same three tokens: your guess

# %%
inputs = tokenizer("The key-value cache stores", return_tensors="pt")  # 6 ids
past_key_values = DynamicCache(config=model.config)
out = model.generate(**inputs, do_sample=False, max_new_tokens=8, past_key_values=past_key_values)
print("cache length after generate:", past_key_values.get_seq_length())
past_key_values.crop(-3)  # forget the last three tokens
print("cache length after crop(-3):", past_key_values.get_seq_length())

kept_after_crop = past_key_values.get_seq_length()

# %% [markdown]
# Generation resumes from position 10: give `generate` the 11 ids whose first 10 the cache holds, and it feeds
# only the 11th.

# %%
# NBVAL_CHECK_OUTPUT
again = model.generate(out[:, :11], attention_mask=torch.ones_like(out[:, :11]), do_sample=False, max_new_tokens=3,
                       past_key_values=past_key_values)
print("regenerated:", again[0, 11:].tolist(), "cropped:", out[0, 11:].tolist())
print("same tokens:", torch.equal(again, out), "| cache length now:", past_key_values.get_seq_length())

# %%
# NBVAL_CHECK_OUTPUT
display(score(guess_kept, kept_after_crop, unit=" tokens", kind="count"))
display(score(guess_same_tokens, torch.equal(again, out), kind="choice"))

# %% [markdown]
# The same calls inside `kvlab.watch`, which records each layer's slots and storage bytes. `holdings` sums them
# per layer kind: `slots_live` and `bytes_per_layer` are one layer's, `bytes_all_layers` is all 30 layers together.

# %%
with kvlab.watch(model) as watch:
    past_key_values = DynamicCache(config=model.config)
    out = model.generate(**inputs, do_sample=False, max_new_tokens=8, past_key_values=past_key_values)
    stages = {"after generate": holdings(past_key_values)}
    past_key_values.crop(-3)
    stages["after crop(-3)"] = holdings(past_key_values)
    model.generate(out[:, :11], attention_mask=torch.ones_like(out[:, :11]), do_sample=False, max_new_tokens=3,
                   past_key_values=past_key_values)
    stages["after resuming"] = holdings(past_key_values)

# %%
# NBVAL_CHECK_OUTPUT
for stage, holding in stages.items():
    full = holding["full"]
    print(f"{stage:>15}: {full['layers']} layers, {full['tokens']} tokens, {full['slots_live']} live slots, "
          f"{number(full['bytes_per_layer'])} B per layer, {number(full['bytes_all_layers'])} B in all")
crop = watch.trace.crops[-1]
print("crop event:", crop["n"], "| layer 0 length", crop["lengths_before"][0], "->", crop["lengths_after"][0])
slot_bytes = stages["after generate"]["full"]["bytes_per_layer"] // 13  # keys + values of one token, one layer
print(f"one slot of one layer: {number(slot_bytes)} B; 13 slots: {number(13 * slot_bytes)} B; "
      f"10 slots: {number(10 * slot_bytes)} B")

# %%
plot_holdings(stages, title="SmolLM2: crop(-3) drops 3 slots per layer, the storage stays until the next update")

# %% [markdown]
# The layers report 10 tokens at once, but the bytes do not move: 19,968 B per layer is 13 slots' worth (10 slots
# would be 15,360 B), 599,040 B over the 30 layers. `crop` slices the stored tensors, and a slice is a *view*
# that keeps the whole storage alive. The memory is released only when the next update concatenates the kept
# slots with the new token into a fresh tensor. Resuming feeds one id and decodes two more tokens: 13 tokens
# again, and 19,968 B per layer again: 13 slots' worth, so the storage matches the slots once more. (Section 2
# shows the bytes follow the slots only at the next update.)

# %% [markdown]
# ## 2. Gemma 3 past its window
#
# **Predict first.** A 520-token prompt is longer than Gemma 3's 512-token window. We generate 4 tokens with a
# `DynamicCache`, then call `crop(-3)`. Will the crop run (True) or be refused (False)?

# %%
guess_gemma_crop_runs = None  # True if crop(-3) runs on Gemma 3 past its window: your guess

# %%
gemma, gemma_tokenizer = kvlab.load("gemma3")
long_ids = text.prompt_ids(gemma_tokenizer, 520)  # (1, 520)
long_inputs = {"input_ids": long_ids, "attention_mask": torch.ones_like(long_ids)}
past_key_values = DynamicCache(config=gemma.config)
out = gemma.generate(**long_inputs, do_sample=False, max_new_tokens=4, past_key_values=past_key_values)
length_before = past_key_values.get_seq_length()
print("cache length:", length_before)

# %% tags=["raises-exception"]
# NBVAL_CHECK_OUTPUT
past_key_values.crop(-3)

# %%
# NBVAL_CHECK_OUTPUT
print("cache length after crop(-3):", past_key_values.get_seq_length())
display(score(guess_gemma_crop_runs, past_key_values.get_seq_length() == length_before - 3, kind="choice"))

# %% [markdown]
# transformers refuses: its sliding layers hold only the last 511 tokens, so removing the newest 3 would have to
# restore 3 old ones it no longer has. Layer 0 is a sliding layer, so nothing was cropped (still 523 tokens). But
# `DynamicCache.crop` raises from inside its loop over the layers (it inherits `Cache.crop` of
# `transformers/cache_utils.py`, 5.25: `for layer_idx in range(len(self.layers))`, each layer's `crop` in turn), so
# on a model whose first layers were full attention, those would already be cropped when the error comes. Under
# `kvlab.watch` the cache checks every layer first and refuses before touching any, naming the fix:

# %% tags=["raises-exception"]
# NBVAL_CHECK_OUTPUT
with kvlab.watch(gemma) as watch:
    past_key_values = DynamicCache(config=gemma.config)
    gemma.generate(**long_inputs, do_sample=False, max_new_tokens=4, past_key_values=past_key_values)
    past_key_values.crop(-3)

# %% [markdown]
# Now with past recording switched on *before* the forward. After `crop(-3)` we resume for 4 more tokens, and
# then call `crop(0)`, which removes no token.

# %%
with kvlab.watch(gemma) as watch:
    past_key_values = DynamicCache(config=gemma.config)
    past_key_values.activate_past_recording()
    out = gemma.generate(**long_inputs, do_sample=False, max_new_tokens=4, past_key_values=past_key_values)
    stages = {"recording, 523 fed": holdings(past_key_values)}
    past_key_values.crop(-3)
    stages["crop(-3)"] = holdings(past_key_values)
    kept = out[:, :521]  # the cache holds the first 520
    more = gemma.generate(kept, attention_mask=torch.ones_like(kept), do_sample=False, max_new_tokens=4,
                          past_key_values=past_key_values)
    stages["4 more tokens"] = holdings(past_key_values)
    past_key_values.crop(0)
    stages["crop(0)"] = holdings(past_key_values)
    gemma(more[:, -1:], past_key_values=past_key_values)  # one more forward: the next update
    stages["next forward"] = holdings(past_key_values)

# %%
# NBVAL_CHECK_OUTPUT
for stage, holding in stages.items():
    sliding, full = holding["sliding"], holding["full"]
    print(f"{stage:>18}: sliding x{sliding['layers']}: {sliding['slots_live']} slots, "
          f"{number(sliding['bytes_all_layers'])} B | full x{full['layers']}: {full['slots_live']} slots, "
          f"{number(full['bytes_all_layers'])} B")
print("same 3 tokens after the crop:", torch.equal(more[:, :524], out))
print("crops:", [(c["n"], c["past_recording"]) for c in watch.trace.crops])
sliding = stages["recording, 523 fed"]["sliding"]
print(f"one sliding layer, 523 fed: {number(sliding['bytes_per_layer'])} B = {sliding['slots_live']} slots x "
      f"{number(sliding['bytes_per_layer'] // sliding['slots_live'])} B")

# %%
plot_holdings(stages, title="Gemma 3 with past recording: crop(-3), 4 more tokens, crop(0), one more forward")

# %% [markdown]
# With past recording the sliding layers kept all 523 tokens (the price: they grow like full layers until a
# crop; 523 slots x 2,048 B = 1,071,104 B per layer), so `crop(-3)` can step back to 520 tokens and trim the
# slots to the window's 511, while the bytes stay: the slice is a view of the 523-slot storage. Recording stays on:
# the 4 more tokens grow the sliding layers to 515 slots, and their bytes to 515 slots' worth (15,820,800 B over
# 15 layers): fresh storage, the old 523-slot tensors are gone.
# `crop(0)` then removes no token but trims them back to 511, the part the next token can attend to. Again the
# storage bytes drop only at the next forward, which concatenates into a fresh 512-slot tensor: that is when
# `crop(0)` actually frees the recorded past. The full layers' slots do not change under `crop(0)`.

# %% [markdown]
# ## 3. Linear-attention layers: a hybrid model rolled back
#
# A linear-attention layer (Mamba, Gated DeltaNet) keeps two states, not keys and values: a short convolution
# window over its last few inputs and a recurrent state that folds in every token so far. Hybrid models mix such
# layers with attention layers (Qwen3-Next, Qwen3.5, Nemotron-H, Jamba, Zamba). Since transformers 5.25,
# `activate_past_recording(recurrent_states_to_keep=N)` makes each linear-attention layer keep copies of its
# recurrent state (of a forward of several tokens, the last N) for `crop(-n)` to use
# (`activate_past_recording` and `crop` of `LinearAttentionCacheLayerMixin`, which `LinearAttentionLayer`
# inherits, in `transformers/cache_utils.py`).
#
# No hybrid model ships with kvlab for offline use (Qwen3-Next has 80 billion parameters), so this section builds
# one tiny, with **random weights**: `kvlab.tiny_model("qwen3_next")` is Qwen3-Next's own code with three Gated
# DeltaNet layers and one full-attention layer. Its text is noise; its cache has the real structure.
#
# **Predict first.** The model reads a 10-token prompt and generates 4 tokens into a plain `DynamicCache`. Will
# `crop(-3)` run (True) or be refused (False)?

# %%
guess_hybrid_crop_runs = None  # True if crop(-3) runs on the hybrid cache without past recording: your guess

# %%
hybrid = kvlab.tiny_model("qwen3_next")  # random weights, Qwen3-Next's structure
print([type(layer).__name__ for layer in DynamicCache(config=hybrid.config).layers])
hybrid_ids = torch.randint(3, 100, (1, 10), generator=torch.Generator().manual_seed(0))
with kvlab.watch(hybrid) as plain_watch:  # its bytes, to compare with the recording run below
    past_key_values = DynamicCache(config=hybrid.config)
    hybrid.generate(hybrid_ids, attention_mask=torch.ones_like(hybrid_ids), do_sample=False, max_new_tokens=4,
                    past_key_values=past_key_values, pad_token_id=0)
length_before = int(past_key_values.get_seq_length())

# %% tags=["raises-exception"]
# NBVAL_CHECK_OUTPUT
past_key_values.crop(-3)

# %%
# NBVAL_CHECK_OUTPUT
print("is_croppable:", past_key_values.is_croppable, "| tokens before and after crop(-3):", length_before,
      int(past_key_values.get_seq_length()))
display(score(guess_hybrid_crop_runs, int(past_key_values.get_seq_length()) == length_before - 3, kind="choice"))

# %% [markdown]
# It raises at once, although `is_croppable` says True: that flag says whether the cache's layer classes can be
# cropped, not whether this cache recorded what a crop needs. Without past recording a linear-attention layer
# keeps its newest state only.
#
# **Predict first.** The same generation, with `activate_past_recording(recurrent_states_to_keep=10)` first. After
# `crop(-3)`, is each linear-attention layer's recurrent state bit for bit the one of a run stopped 3 tokens
# earlier (True or False)?

# %%
guess_state_restored = None  # True if every restored recurrent state equals the stopped run's exactly: your guess

# %%
KEEP = 10  # recurrent_states_to_keep: one state per token of the 10-token prompt; each decoded token adds one more
with kvlab.watch(hybrid) as watch:
    past_key_values = DynamicCache(config=hybrid.config)
    past_key_values.activate_past_recording(recurrent_states_to_keep=KEEP)
    hybrid.generate(hybrid_ids, attention_mask=torch.ones_like(hybrid_ids), do_sample=False, max_new_tokens=4,
                    past_key_values=past_key_values, pad_token_id=0)
    recorded = recorded_bytes(past_key_values)  # the copies of recurrent states the layers keep
    past_key_values.crop(-3)
stopped = DynamicCache(config=hybrid.config)  # the same run stopped 3 tokens earlier: the prompt's forward only
stopped.activate_past_recording(recurrent_states_to_keep=KEEP)
hybrid.generate(hybrid_ids, attention_mask=torch.ones_like(hybrid_ids), do_sample=False, max_new_tokens=1,
                past_key_values=stopped, pad_token_id=0)
linear = [i for i, layer in enumerate(past_key_values.layers) if hasattr(layer, "recurrent_states")]
matches = [state_match(past_key_values.layers[i].recurrent_states[0], stopped.layers[i].recurrent_states[0])
           for i in linear]

# %%
# NBVAL_CHECK_OUTPUT
crop = watch.trace.crops[-1]
print(f"crop(-3): layer lengths {crop['lengths_before']} -> {crop['lengths_after']}, "
      f"recurrent states restored: {crop['recurrent_states_restored']}")
print(f"layers {linear} equal the stopped run's bit for bit:", [m.equal for m in matches],
      "| largest difference:", marks(str(max(m.max_abs_difference for m in matches))))
display(score(guess_state_restored, all(m.equal for m in matches), kind="choice"))

# %%
# NBVAL_CHECK_OUTPUT
one_state = past_key_values.layers[0].recurrent_states[0]  # (batch, value heads, key dim, value dim)
state_bytes = one_state.numel() * one_state.element_size()
held_before, held_after = bytes_around_last_crop(watch.trace)
print(f"one recurrent state: {tuple(one_state.shape)} {str(one_state.dtype).split('.')[-1]} = {number(state_bytes)} B")
print(f"recorded before the crop: {number(recorded)} B = {recorded // state_bytes} copies ({len(linear)} layers x "
      f"{recorded // state_bytes // len(linear)} tokens)")
print(f"the trace's bytes held: {number(held_before)} B before the crop, {number(held_after)} B after it; "
      f"the same run without recording: {number(plain_watch.trace.bytes_by_step()[-1])} B")

# %% [markdown]
# Bit for bit: in each of the 3 linear-attention layers the crop put back the copy taken before the 11th token,
# which is the state a run that stopped after the prompt ends with (the largest difference is 0.0). The copies are
# the price: 4,096 B per layer and token here, 159,744 B for 13 tokens in 3 layers, and the trace counts them as
# held (195,328 B before the crop, against 21,760 B for the same run without recording; the rest of the difference
# is the convolution inputs a recording layer keeps too: while it records, `update_conv_state` keeps the full inputs
# instead of the last `conv_kernel_size`, `LinearAttentionLayer` in `transformers/cache_utils.py`). The crop empties
# the copies; the trace still shows 35,584 B after it because the cropped convolution inputs are views of their
# longer storage until the next forward, as the keys and values were in section 1.
#
# `recurrent_states_to_keep` counts for a forward of several tokens. With N = 2, less than the 10-token prompt, the
# prompt's forward keeps the state from before it and the one before its last token, so the oldest copy is not the
# state it stands for: transformers would put it back without a word (`update_recurrent_state` records the state
# from before the forward and all but the last of the N states the model passes, and `crop(-n)` takes the history's
# n-th entry from the end with no check: `LinearAttentionLayer` and the `LinearAttentionCacheLayerMixin` it inherits
# `crop` from, in `transformers/cache_utils.py`). kvlab refuses a crop that reaches it and names the valid counts:

# %%
# NBVAL_CHECK_OUTPUT
with kvlab.watch(hybrid):
    short = DynamicCache(config=hybrid.config)
    short.activate_past_recording(recurrent_states_to_keep=2)  # N = 2, less than the prompt
    hybrid.generate(hybrid_ids, attention_mask=torch.ones_like(hybrid_ids), do_sample=False, max_new_tokens=4,
                    past_key_values=short, pad_token_id=0)
    try:
        short.crop(-5)
    except kvlab.CacheCropError as err:
        print(err)

# %% [markdown]
# Up to 4 tokens back is exact here: the 3 decoded tokens and the last one of the prompt. Before transformers 5.25
# (kvlab supports 5.21 to 5.25) a linear-attention layer keeps no copies at all: its crop trimmed the convolution
# inputs and left the recurrent state where it was, so kvlab refuses there every count but `crop(0)`.

# %% [markdown]
# ## 4. Live: what each layer holds after `crop(-n)`
#
# kvlab's tiny Gemma 3 has a window of 8 and 6 layers (sliding, sliding, full, twice). It reads 14 prompt tokens
# and generates 6, then `crop(-n)`. Move *n* and tick *past recording*: without it, `crop(-n)` with n of 1 or
# more is refused (19 tokens fed, past the window); with it, the sliding layers hold the whole past until the crop
# trims them. Red columns are the positions the crop removed, orange ones what a sliding layer has dropped.

# %%
tiny = kvlab.tiny_model("tiny-gemma3")
tiny_ids = torch.randint(3, 128, (1, 14), generator=torch.Generator().manual_seed(0))


def crop_picture(n, past_recording):
    """Generate on tiny Gemma 3 with a DynamicCache, crop(-n), draw the positions each layer holds."""
    with kvlab.watch(tiny) as watch:
        past_key_values = DynamicCache(config=tiny.config)
        if past_recording:
            past_key_values.activate_past_recording()
        tiny.generate(tiny_ids, attention_mask=torch.ones_like(tiny_ids), do_sample=False, max_new_tokens=6,
                      past_key_values=past_key_values, pad_token_id=0)
        try:
            past_key_values.crop(-n)
            refusal = None
        except kvlab.CacheCropError as err:
            refusal = str(err).split(", ")[0]  # its first clause: "crop(-n) refused: sliding layer 0 ..."
        rows = cached_positions(past_key_values)
    fig, ax = subplots(figsize=(9, 3.2))
    length = past_key_values.get_seq_length()
    if refusal is not None:  # only without past recording
        plot_cached_positions(rows, title=f"without past recording, {refusal}", ax=ax, cropped=0)
    elif past_recording:
        plot_cached_positions(rows, title=f"with past recording, after crop(-{n}): {length} tokens", ax=ax, cropped=n)
    else:
        plot_cached_positions(rows, title=f"without past recording, after crop(-{n}): {length} tokens", ax=ax,
                              cropped=n)
    return fig


live(crop_picture,
     n=widgets.IntSlider(value=3, min=0, max=8, continuous_update=False, description="n in crop(-n)"),
     past_recording=widgets.Checkbox(value=True, description="past recording"))

# %%
# NBVAL_CHECK_OUTPUT
for recording in (False, True):
    with kvlab.watch(tiny) as watch:
        past_key_values = DynamicCache(config=tiny.config)
        if recording:
            past_key_values.activate_past_recording()
        tiny.generate(tiny_ids, attention_mask=torch.ones_like(tiny_ids), do_sample=False, max_new_tokens=6,
                      past_key_values=past_key_values, pad_token_id=0)
        rows = cached_positions(past_key_values)
    print(f"past recording {recording!s:>5}:", {f"{r['layer_idx']} {layer_kind_label(r['layer_kind'])}": (
        r["positions_live"][0], r["positions_live"][-1], len(r["positions_visible"])) for r in rows[:3]})

# %% [markdown]
# Before any crop, a full layer holds positions 0–18 and a sliding layer only 12–18, the 7 that the next token
# (position 19) attends to together with itself. With past recording the sliding layers hold everything too,
# but the next token still sees only the last 7: the rest is there only so that a crop can step back.

# %% [markdown]
# ## 5. Speculative decoding: accept, reject, roll back
#
# Speculative decoding proposes several tokens cheaply, checks them all with **one** forward of the model, and
# keeps the longest prefix that matches what greedy decoding would have chosen, plus the model's own token at
# the first disagreement. The forward wrote keys and values for every proposal, so the rejected ones are
# cropped out with `crop(-rejected)`. Here the proposals come from *prompt lookup*: find the last token earlier
# in the text and propose the 5 tokens that followed it, which is free and works when the output copies the
# input. (`kvlab.measure.rollback.speculative_generate` is the loop, a few dozen lines.)
#
# **Predict first.** The model is asked to copy a 10-item list. Will the loop produce exactly the greedy
# output? How many forwards will it need (up to 48 tokens; the reply may end sooner), and how many
# proposals will it roll back?

# %%
guess_same_as_greedy = None  # True if the loop's tokens equal plain greedy decoding: your guess
guess_forwards = None  # forwards of the model, the prefill included: your guess
guess_rolled_back = None  # drafted tokens rolled back by crop: your guess

# %%
copy_prompt = encode(tokenizer, "Copy this list exactly, twice: red, orange, yellow, green, blue, indigo, "
                                "violet, white, black, grey.", chat=True)
greedy = model.generate(copy_prompt, attention_mask=torch.ones_like(copy_prompt), do_sample=False,
                        max_new_tokens=48)[0, copy_prompt.shape[-1]:].tolist()
spec = speculative_generate(model, copy_prompt, 48, prompt_lookup_draft(ngram=1), k=5,
                            eos_token_id=tokenizer.eos_token_id)

# %%
# NBVAL_CHECK_OUTPUT
print("same tokens as greedy:", spec.token_ids == greedy)
drafted = sum(1 for step in spec.steps if step.drafted)
print(f"forwards: 1 prefill + {len(spec.steps)} after it ({drafted} verified a draft, "
      f"{len(spec.steps) - drafted} had no draft and decoded one token) = {spec.forwards}")
print(f"drafted tokens: {spec.accepted + spec.rejected} = {spec.accepted} accepted + {spec.rejected} rolled back; "
      f"crops: {[c['n'] for c in spec.cache.trace.crops]}")
produced = 1 + spec.accepted + len(spec.steps)  # the prefill's token, accepted drafts, the model's own token per forward
print(f"tokens produced: 1 by the prefill + {spec.accepted} accepted drafts + {len(spec.steps)} of the model's own "
      f"(one per forward after the prefill) = {produced}")
print(f"kept: {len(spec.token_ids)}, up to and including <|im_end|>; "
      f"{produced - len(spec.token_ids)} produced after it are dropped")
print("last kept token is <|im_end|>:", spec.token_ids[-1] == tokenizer.eos_token_id)
print(f"plain greedy decoding of the same {len(greedy)} tokens: {len(greedy)} forwards, one per token")
print(repr(tokenizer.decode(spec.token_ids)))

# %%
# NBVAL_CHECK_OUTPUT
display(score(guess_same_as_greedy, spec.token_ids == greedy, kind="choice"))
display(score(guess_forwards, spec.forwards, unit=" forwards", kind="count"))
display(score(guess_rolled_back, spec.rejected, unit=" tokens", kind="count"))

# %%
plot_speculative_steps(spec)

# %% [markdown]
# Every rejected proposal was written into the cache by the verify forward and removed by `crop(-rejected)` right
# after, so the next forward starts from exactly the tokens that were kept. The output is token-for-token greedy
# decoding, in fewer forwards than greedy's one per token (both counts are printed above). The counts add up as
# printed: every forward after the prefill commits its accepted drafts plus one token of the model's own, and the
# last verify forward went on past `<|im_end|>`: the tokens it committed after `<|im_end|>` (counted above) are
# produced but not kept, since the reply ends there. The figure draws every forward after the prefill: those with a
# draft as bars, those without one marked "no draft". On Gemma 3 the same loop needs `activate_past_recording()`
# once the sequence passes the window (`speculative_generate(..., past_recording=True)`), for the reason seen in
# section 2.

# %% [markdown]
# ### Fewer forwards: is it faster?
#
# The counts above are exact on any machine. What they cost here is a measurement: the same loop run twice on
# the same prompt, once with prompt lookup and once with a draft that never proposes anything, which is plain
# greedy decoding (one forward per token, no crop), so the only difference is the drafting. The runs are repeated
# and interleaved (greedy, speculative, greedy, ...); each is printed as a median with its interquartile range
# (IQR), and the verdict compares the medians, with a bootstrap interval of their ratio.
#
# What the counts predict: a verify forward feeds up to 6 tokens instead of 1, and on a small model much of a
# forward's time does not depend on how many tokens it feeds (reading the weights, launching 30 layers' worth of
# operations from Python), so 9 forwards should beat 25. Against that, each verify forward does the arithmetic of
# every drafted token, rejected ones included, and on a 2-core CPU that arithmetic is not free: the larger the
# share of a forward's time it takes, the less the saved forwards are worth.

# %%
def no_draft(ids, k):  # proposes nothing: every forward decodes one token, plain greedy decoding
    return []


plain = speculative_generate(model, copy_prompt, 48, no_draft, k=5, eos_token_id=tokenizer.eos_token_id)
runs = {
    "greedy decoding": lambda: speculative_generate(model, copy_prompt, 48, no_draft, k=5,
                                           eos_token_id=tokenizer.eos_token_id),
    "speculative decoding": lambda: speculative_generate(model, copy_prompt, 48, prompt_lookup_draft(ngram=1), k=5,
                                                eos_token_id=tokenizer.eos_token_id),
}
times = timing.time_interleaved(runs, repeats=3 if QUICK else 7, warmup=0 if QUICK else 1)  # 3 at least

# %%
# NBVAL_CHECK_OUTPUT
print("no draft gives greedy's tokens:", plain.token_ids == greedy, "| forwards:", plain.forwards, "vs", spec.forwards)
fed_plain = sum(1 + len(step.drafted) for step in plain.steps)
fed_spec = sum(1 + len(step.drafted) for step in spec.steps)
print(f"tokens fed after the prefill: greedy {fed_plain} in {len(plain.steps)} forwards, speculative {fed_spec} in "
      f"{len(spec.steps)} forwards")

# %%
# Timings (not checked: they depend on the machine). Medians of interleaved runs, and speculative / greedy.
for label, measured in times.items():
    print(f"{label:>26}: {measured.describe()}")
print(timing.compare(times["greedy decoding"], times["speculative decoding"], warn=False).verdict())

# %% [markdown]
# Read the verdict as printed. "faster" means the forwards saved outweighed the extra tokens each verify forward
# fed; "no difference beyond noise" (an interval that contains 1) or "too noisy to tell" means this machine could
# not tell the two apart in these repeats; "slower" would mean the verify forwards' extra arithmetic cost more
# than the 16 forwards saved. Where a forward of 6 tokens costs about what a forward of 1 does, the premise of
# speculative decoding (source: Leviathan et al. 2023, "Fast Inference from Transformers via Speculative
# Decoding"), the saving is larger; with a separate draft model, its own forwards would be added to the
# speculative side.

# %% [markdown]
# ## Takeaway
#
# - `past_key_values.crop(-n)` forgets the last *n* tokens. Full layers always can. Sliding layers past their
#   window can only if `activate_past_recording()` ran before the forward, at the price of keeping the past
#   until the next crop; linear-attention layers refuse any crop without it.
# - A linear-attention layer rolls back what it recorded: since transformers 5.25,
#   `activate_past_recording(recurrent_states_to_keep=N)` keeps a copy of its recurrent state per token (the last
#   N of a forward of several tokens), and `crop(-n)` puts back the one from n tokens earlier, bit for bit. The
#   copies are held bytes until the crop.
# - A crop frees no memory by itself: it leaves views of the old storage, released by the next update.
#   `crop(0)` trims recording sliding layers back to the window; the bytes go at the next forward.
# - Speculative decoding is crop in a loop: verify *k* proposals in one forward, keep what matches, crop the
#   rest. The output equals greedy decoding, in fewer forwards; whether fewer forwards took less time on this
#   machine is the verdict printed at the end of section 5 (a verify forward feeds several tokens).
#
# **Next:** [08 · Prefix caching](08_prefix_caching.ipynb): prefill a shared prefix once and copy the cache
# for each question.
