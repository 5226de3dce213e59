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
# **Learning goal.** After this notebook you can roll a cache back by *n* tokens with `cache.crop(-n)`, know
# why that fails on sliding-window layers past their window unless you asked for past recording, know what a
# crop frees (less than you would think), and build the accept/reject loop of speculative decoding on it.
#
# **In kvlab's words.** A crop makes the cache forget its last *n* tokens, as if they had never been fed.
# For a full-attention layer that is just dropping the last *n* slots. A sliding layer keeps only its last
# `window - 1` tokens; once it has moved past its window, forgetting the newest tokens would have to bring the
# oldest ones back into view, and those are gone. `cache.activate_past_recording()` makes sliding layers keep
# everything until the next crop, which then trims them back to the window.
#
# SmolLM2-135M-Instruct (30 full layers) and Gemma 3 270M (5 sliding : 1 full, window 512), greedy, CPU.

# %%
import sys

import torch
from transformers import DynamicCache

import kvlab
from kvlab.measure import text
from kvlab.plots.positions import plot_cached_positions
from kvlab.plots.speculative import plot_speculative_steps
from kvlab.rollback import cached_positions, continue_generation, holdings, prompt_lookup_draft, speculative_generate
from kvlab.run import encode

torch.manual_seed(0)
model, tokenizer = kvlab.load("smollm2")
print(f"Python {sys.version.split()[0]} (the Gemma prompt below is Python's own reference text)")

# %% [markdown]
# ## 1. `crop(-3)` on SmolLM2
#
# **Predict first.** After generating 8 tokens after a 6-token prompt, the cache holds 13 tokens (the 8th new
# token was never fed back). After `crop(-3)`, how many tokens does each layer hold, and how many **bytes**?
# If we then continue from the kept tokens, do we get the same three tokens back?

# %%
prompt = tokenizer("The key-value cache stores", return_tensors="pt").input_ids  # (1, 6)
first = kvlab.run(model, tokenizer, prompt, max_new_tokens=8)
cache = first.cache_object
before = holdings(cache)
cache.crop(-3)
after = holdings(cache)

# %%
# NBVAL_CHECK_OUTPUT
print("before crop(-3):", before)
print("after  crop(-3):", after)

# %%
# NBVAL_CHECK_OUTPUT
kept = torch.tensor([prompt[0].tolist() + first.generated_token_ids[:5]])  # 11 ids; the cache holds the first 10
again = continue_generation(model, kept, cache, max_new_tokens=3)  # generate(kept, cache=cache): feeds 1 id
print("regenerated:", again, "original:", first.generated_token_ids[5:8])
print("same tokens:", again == first.generated_token_ids[5:8])
print("after continuing:", holdings(cache))

# %% [markdown]
# The layers report 10 tokens at once, but the bytes do not move: 19,968 B is 13 slots' worth (10 slots would
# be 15,360 B). `crop` slices the stored tensors, and a slice is a *view* that keeps the whole storage alive.
# The memory is released only when the next update concatenates the kept slots with the new token into a fresh
# tensor. Continuing feeds the one uncached id and decodes two more tokens: 13 tokens again, in new storage,
# and the three regenerated tokens are the ones we cropped.

# %% [markdown]
# ## 2. Gemma 3 past its window
#
# **Predict first.** A 520-token prompt is longer than Gemma 3's 512-token window. After generating a few
# tokens with a default DynamicCache, we ask for `crop(-3)`. Which layers can do it, and what happens to the
# call as a whole?

# %%
gemma, gemma_tokenizer = kvlab.load("gemma3")
long_prompt = text.prompt_ids(gemma_tokenizer, 520)  # (1, 520)
bare = DynamicCache(config=gemma.config)  # transformers' own class, not instrumented
new_ids = continue_generation(gemma, long_prompt, bare, max_new_tokens=4)  # generate(long_prompt, cache=bare)

# %% tags=["raises-exception"]
# NBVAL_CHECK_OUTPUT
bare.crop(-3)

# %% [markdown]
# transformers refuses: its sliding layers hold only the last 511 tokens, so removing the newest 3 would have
# to restore 3 old ones it no longer has. It raises from inside its loop over the layers, so on a model whose
# first layers were full attention, those would already be cropped when the error comes. kvlab's instrumented
# cache checks every layer first and refuses before touching any:

# %% tags=["raises-exception"]
# NBVAL_CHECK_OUTPUT
plain = kvlab.run(gemma, gemma_tokenizer, long_prompt, max_new_tokens=4)
plain.cache_object.crop(-3)

# %% [markdown]
# Now the same run with past recording switched on *before* generating:

# %%
recording = kvlab.run(gemma, gemma_tokenizer, long_prompt, max_new_tokens=4, past_recording=True)
gemma_cache = recording.cache_object
print("holding before the crop:", holdings(gemma_cache))

# %%
# NBVAL_CHECK_OUTPUT
gemma_cache.crop(-3)
print("after crop(-3):", holdings(gemma_cache))
print("crop event:", {k: gemma_cache.trace.crops[-1][k] for k in ("n", "past_recording")})

# %% [markdown]
# With past recording the sliding layers kept all 523 tokens (that is the price: they grow like full layers
# until a crop), so `crop(-3)` can step back to 520 tokens and trim the slots to the window's 511.

# %% [markdown]
# ## 3. What `crop(0)` does and does not free
#
# **Predict first.** `crop(0)` removes no token. On a recording Gemma cache that holds 523 tokens in its
# sliding layers, does it change the slots? The bytes? And one decoding step later?

# %%
# NBVAL_CHECK_OUTPUT
zero = kvlab.run(gemma, gemma_tokenizer, long_prompt, max_new_tokens=4, past_recording=True).cache_object
print("before crop(0):       ", holdings(zero))
zero.crop(0)
print("after crop(0):        ", holdings(zero))
with torch.inference_mode():
    gemma(torch.tensor([[gemma_tokenizer.eos_token_id]]), cache=zero)  # one more step, any token
print("after one more step:  ", holdings(zero))

# %% [markdown]
# `crop(0)` is not a no-op on a recording sliding layer: it trims the slots back to the window (523 → 511)
# while the full layers are untouched. It frees **no bytes**, for the same reason as above: the trimmed tensors
# are views of the old storage. The next update allocates a fresh 512-slot tensor and only then is the recorded
# past released. On a layer that is not recording and is past its window, even `crop(0)` raises.

# %% [markdown]
# ## 4. The cached-positions picture, from a live cache
#
# **Predict first.** A model with a sliding window of 8 (kvlab's tiny Gemma 3: layers sliding, sliding, full ×
# 2) reads 14 prompt tokens and generates 6. Which positions does a full layer hold, which a sliding one? And
# with past recording on, before any crop?

# %%
tiny = kvlab.tiny_model("tiny-gemma3")
tiny_prompt = torch.randint(3, 128, (1, 14), generator=torch.Generator().manual_seed(0))
windowed = kvlab.run(tiny, None, tiny_prompt, max_new_tokens=6).cache_object
recorded = kvlab.run(tiny, None, tiny_prompt, max_new_tokens=6, past_recording=True).cache_object

# %%
# NBVAL_CHECK_OUTPUT
for name, live in {"default": windowed, "past recording": recorded}.items():
    rows = cached_positions(live)
    print(f"{name:>14}:", {f"{r['layer_idx']} {r['kind']}": (r["held"][0], r["held"][-1], len(r["visible"]))
                          for r in rows[:3]})

# %%
plot_cached_positions(cached_positions(windowed), title="Default DynamicCache: full layers vs a window of 8")

# %%
plot_cached_positions(cached_positions(recorded), title="With activate_past_recording(), before any crop")

# %% [markdown]
# A full layer holds positions 0–18; a sliding layer holds only 12–18, the 7 that the next token (position 19)
# will attend to together with itself. With past recording the sliding layers hold everything too, but the
# next token still sees only the last 7: the rest is there only so that a crop can step back.

# %% [markdown]
# ## 5. Speculative decoding: accept, reject, roll back
#
# Speculative decoding proposes several tokens cheaply, checks them all with **one** forward of the model, and
# keeps the longest prefix that matches what greedy decoding would have chosen, plus the model's own token at
# the first disagreement. The forward wrote keys and values for every proposal, so the rejected ones are
# cropped out. Here the proposals come from *prompt lookup*: find the last token earlier in the text and
# propose the 5 tokens that followed it, which is free and works when the output copies the input.
#
# **Predict first.** The model is asked to copy a 10-item list. Will the loop produce exactly the greedy
# output? How many forwards will it need for 25 tokens, and how many proposals will it have to roll back?

# %%
copy_prompt = encode(tokenizer, "Copy this list exactly, twice: red, orange, yellow, green, blue, indigo, "
                                "violet, white, black, grey.", chat=True)
greedy = kvlab.run(model, tokenizer, copy_prompt, max_new_tokens=48)
spec = speculative_generate(model, copy_prompt, 48, prompt_lookup_draft(ngram=1), k=5,
                            eos_token_id=tokenizer.eos_token_id)

# %%
# NBVAL_CHECK_OUTPUT
print("same tokens as greedy:", spec.token_ids == greedy.generated_token_ids)
print(f"{len(spec.token_ids)} tokens in {spec.forwards} forwards; "
      f"drafts accepted {spec.accepted}, rolled back {spec.rejected}")
print("crops:", [c["n"] for c in spec.cache.trace.crops])
print(repr(tokenizer.decode(spec.token_ids)))

# %%
plot_speculative_steps(spec)

# %% [markdown]
# Every rejected proposal was written into the cache by the verify forward and removed by `crop(-rejected)`
# right after, so the next forward starts from exactly the tokens that were kept. The output is
# token-for-token greedy decoding, in fewer forwards. On Gemma 3 the same loop needs
# `activate_past_recording()` once the sequence passes the window (`speculative_generate(...,
# past_recording=True)`), for the reason seen in section 2.

# %% [markdown]
# ## Takeaway
#
# - `cache.crop(-n)` forgets the last *n* tokens. Full layers always can; sliding layers past their window only
#   if `activate_past_recording()` was called before generating, at the price of keeping the whole past until
#   the next crop.
# - A crop frees no memory by itself: it leaves views of the old storage, released by the next update.
#   `crop(0)` trims recording sliding layers back to the window, but frees nothing either, until that update.
# - Speculative decoding is crop in a loop: verify *k* proposals in one forward, keep what matches, crop the
#   rest. The output equals greedy decoding.
#
# **Next:** [08 · Prefix caching](08_prefix_caching.ipynb): prefill a shared prefix once and copy the cache
# for each question.
