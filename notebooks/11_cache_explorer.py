# ---
# jupyter:
#   jupytext:
#     formats: ipynb,py:percent
#     text_representation:
#       extension: .py
#       format_name: percent
#       format_version: '1.3'
#       jupytext_version: 1.19.6
#   kernelspec:
#     display_name: Python 3 (ipykernel)
#     language: python
#     name: python3
# ---

# %% [markdown]
# # 11 · The Cache Explorer: play with every cache, live
#
# **Learning goal.** Use the explorer to test your own predictions: pick a model and a cache, press Run, and
# watch the cache fill, wrap, get masked, quantized, offloaded and cropped while the tokens appear.
#
# **In kvlab's words.** The explorer is a small app on top of everything the earlier notebooks measured. Run
# generates greedily with an instrumented cache in a background thread (so the page stays responsive and Stop
# works); every few tokens it redraws three pictures from the cache's `Trace`:
# - **bytes held per layer kind** against the step (step 0 is the prefill);
# - **allocated, live and masked slots** summed over layers: the gap between allocated and live is a static
#   cache's waste;
# - **a layer × position map**: blue = live, grey = masked (allocated but empty), orange = evicted by a sliding
#   window, purple/light blue = quantized/full-precision residual, red = cropped.
#
# Only the options that apply to the chosen cache are shown. Invalid combinations are explained in the app.
# "Add to comparison" keeps a run drawn dashed and as a table row; the crop control applies `cache.crop(-n)`
# to the last run's cache, and tells you the rule when the crop cannot be undone.
#
# The same app runs without Jupyter: `kvlab explore` serves it with Voila on 127.0.0.1.

# %%
import transformers
from IPython.display import HTML, Image

from kvlab.explorer import explore

transformers.logging.disable_progress_bar()
transformers.logging.set_verbosity_error()
explorer = explore(model_name="smollm2", preload=True)
explorer

# %% [markdown]
# Play above. Below, the same app driven from code (the buttons call these same methods), so this notebook also
# shows its results when read without a running kernel.
#
# ## 1. Waste, seen live
#
# **Predict first.** SmolLM2 has 30 full-attention layers. With a static cache of `max_cache_len=64`, the
# 21-token question preset and 8 new tokens, how many slots are allocated, how many live, how many masked?

# %%
demo = explore(model_name="smollm2")
demo.run_and_wait(cache="static", max_cache_len=64, max_new_tokens=8, preset="kv_cache_question")
Image(demo.plot.value)

# %%
# NBVAL_CHECK_OUTPUT
row = demo.summary_rows()[-1]
print(f"{row['label']}: prompt {row['prompt_tokens']} tokens, {row['new_tokens']} new")
print(f"slots allocated {row['slots_allocated']:,}  live {row['slots_live']:,}  masked {row['slots_masked']:,}"
      f"  ({row['waste_pct']}% waste)  bytes {row['bytes_now']:,}")

# %% [markdown]
# 30 layers × 64 slots are allocated before the first token; 30 × 28 hold a token (21 + 8 − 1: the last token
# is returned, never fed back); the rest is masked. Now keep that run and compare it with a dynamic cache.
#
# **Predict first.** Will the dynamic cache's bytes line start lower or higher than the static one, and where
# does it end?

# %%
demo.on_add_to_comparison()
demo.run_and_wait(cache="dynamic")
Image(demo.plot.value)

# %%
# NBVAL_CHECK_OUTPUT
for row in demo.summary_rows():
    print(f"{row['run']:>4} {row['label']:<36} allocated {row['slots_allocated']:>5,}  live {row['slots_live']:>5,}"
          f"  peak bytes {row['peak_bytes']:>9,}")

# %% [markdown]
# The dynamic cache allocates exactly what is live: 840 slots against the static cache's 1,920, so it holds 44 %
# of the static cache's bytes at the end (1,290,240 of 2,949,120).
#
# ## 2. A crop the cache cannot undo
#
# Sliding-window layers drop the tokens that leave their window, so removing the last tokens (what speculative
# decoding and chat rollback do) would need tokens that are gone. The tiny random model `tiny-gemma3` has a
# window of 8, so the question preset (104 bytes: one token per byte for the tiny models) is far past it.
#
# **Predict first.** After a dynamic run, does `crop(-2)` work? And after the same run with past recording on?

# %%
tiny = explore(model_name="tiny-gemma3")
tiny.run_and_wait(cache="dynamic", max_new_tokens=6, preset="kv_cache_question")
tiny.crop_n.value = 2
tiny.on_crop()
refusal = tiny.message_text
HTML(tiny.message.value)

# %%
tiny.run_and_wait(past_recording=True)
event = tiny.on_crop()
Image(tiny.plot.value)

# %%
# NBVAL_CHECK_OUTPUT
print("without past recording:", refusal[:90], "...")
print("with past recording:   ", tiny.message_text)
print("sliding layers now hold", sorted({r["slots_live"] for r in tiny.session.current.layer_rows()}), "tokens")

# %% [markdown]
# **Takeaway.** With past recording the sliding layers keep every token until a crop (the map's long blue rows
# before the crop: more memory), and the crop then restricts them to the window again (orange = evicted, red =
# cropped). Without it, a sliding cache cannot be rolled back: the explorer refuses and says why, where plain
# transformers would raise from inside a layer.
#
# **Next.** Use the explorer to check your answers to the earlier notebooks' "Predict first" questions, starting
# from `00_start_here`; `kvlab explore` opens the same app in a browser tab.
