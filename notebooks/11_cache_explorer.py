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
# - **a layer × position map**: green = live, grey = masked (allocated but empty), orange = evicted by a sliding
#   window, dark blue/light blue = quantized/full-precision residual, red = cropped. These are kvlab's colours
#   in every notebook's figures too (`kvlab/plots/palette.py`).
#
# Only the options that apply to the chosen cache are shown. Invalid combinations are explained in the app.
# "Add to comparison" keeps a run drawn dashed and as a table row; the crop control applies `cache.crop(-n)`
# to the last run's cache, and tells you the rule when the crop cannot be undone.
#
# The same app runs without Jupyter: `kvlab explore` serves it with Voila on this machine only (localhost).

# %%
import transformers
from IPython.display import HTML, Image

from kvlab.explorer import explore
from kvlab.i18n import layer_kind_label, marks, number, percent
from kvlab.predictions import score

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
# 21-token question preset and 8 new tokens, how many slots (summed over the layers) are allocated, how many
# live, how many masked when the run ends? Type your three numbers, then run the cells below.

# %%
guess_allocated = None  # slots allocated, all layers: your guess
guess_live = None  # slots holding a token: your guess
guess_masked = None  # slots allocated but empty: your guess

# %%
demo = explore(model_name="smollm2")
# chat=False: the preset's text as it is, 21 tokens (the explorer wraps it in SmolLM2's chat template by default)
demo.run_and_wait(cache="static", max_cache_len=64, max_new_tokens=8, preset="kv_cache_question", chat=False)
Image(demo.plot.value)

# %%
# NBVAL_CHECK_OUTPUT
row = demo.summary_rows()[-1]
print(f"{row['label']}: prompt {row['prompt_tokens']} tokens, {row['new_tokens']} new")
print(f"slots allocated {number(row['slots_allocated'])}  live {number(row['slots_live'])}  "
      f"masked {number(row['slots_masked'])}  ({marks(str(row['waste_pct']))}% waste)  "
      f"bytes {number(row['bytes_now'])}")

# %%
# NBVAL_CHECK_OUTPUT
display(score(guess_allocated, row["slots_allocated"], kind="count", label="slots allocated:"))
display(score(guess_live, row["slots_live"], kind="count", label="slots live:"))
display(score(guess_masked, row["slots_masked"], kind="count", label="slots masked:"))

# %% [markdown]
# 30 layers × 64 slots are allocated from the prefill on (the black line of the slots panel is flat); 30 × 28
# hold a token at the end (21 + 8 − 1: the last token is returned, never fed back); the rest is masked. Now
# keep that run and compare it with a dynamic cache on the same prompt.
#
# **Predict first.** Does the dynamic cache's bytes line start below the static one (True or False)? And what
# share of the static cache's bytes, in percent, does the dynamic cache hold at the end?

# %%
guess_starts_lower = None  # True or False: your guess
guess_end_share = None  # % of the static cache's final bytes: your guess

# %%
demo.on_add_to_comparison()
demo.run_and_wait(cache="dynamic")
Image(demo.plot.value)

# %%
# NBVAL_CHECK_OUTPUT
for row in demo.summary_rows():  # the run kept for comparison, then the current one
    print(f"{row['label']:<36} allocated {number(row['slots_allocated']):>5}  "
          f"live {number(row['slots_live']):>5}  peak bytes {number(row['peak_bytes']):>9}")

# %%
# NBVAL_CHECK_OUTPUT
static_bytes = demo.session.comparison[0].trace.bytes_by_step()  # bytes held after each step, step 0 = prefill
dynamic_bytes = demo.session.current.trace.bytes_by_step()
starts_lower = dynamic_bytes[0] < static_bytes[0]
end_share = 100 * dynamic_bytes[-1] / static_bytes[-1]
print(f"after the prefill: dynamic {number(dynamic_bytes[0])} B, static {number(static_bytes[0])} B")
print(f"at the end: dynamic {number(dynamic_bytes[-1])} B = {percent(end_share, 0)} of static "
      f"{number(static_bytes[-1])} B")
display(score(guess_starts_lower, starts_lower, kind="choice", label="starts lower:"))
display(score(guess_end_share, end_share, unit="%", kind="share", label="end share:"))

# %% [markdown]
# The dynamic cache allocates exactly what is live: 840 slots against the static cache's 1,920, so it holds 44%
# of the static cache's bytes at the end (1,290,240 of 2,949,120). It starts at the prefill's 21 tokens and
# grows by one token a step; the static line is flat at its 64 slots from the prefill on.
#
# ## 2. Cropping a sliding cache
#
# Sliding-window layers drop the tokens that leave their window. Taking the last tokens back out (what
# speculative decoding and chat rollback do) is `crop(-n)`. The tiny random model `tiny-gemma3` has a
# window of 8 (its sliding layers keep the last 7 tokens: window − 1), so the question preset (104 bytes: one
# token per byte for the tiny models) is far past it.
#
# **Predict first.** After a dynamic run of 6 new tokens, does `crop(-2)` succeed (True or False)? And after the
# same run with past recording on?

# %%
guess_crop_works = None  # True or False: your guess for the plain dynamic run
guess_crop_works_recorded = None  # True or False: your guess with past recording

# %%
tiny = explore(model_name="tiny-gemma3")
tiny.run_and_wait(cache="dynamic", max_new_tokens=6, preset="kv_cache_question")
tiny.crop_n.value = 2
crop_works = tiny.on_crop() is not None  # on_crop returns the crop event, or None when it refuses
refusal = tiny.message_text
HTML(tiny.message.value)

# %% [markdown]
# The same run with past recording on, drawn before the crop: on the map, the sliding layers (s) are now green
# over every position, like the full layers (f), instead of orange before their last 7.

# %%
tiny.run_and_wait(past_recording=True)
before = tiny.session.current.layer_rows()
Image(tiny.plot.value)

# %% [markdown]
# Now the same `crop(-2)` on this cache:

# %%
event = tiny.on_crop()
crop_works_recorded = event is not None
Image(tiny.plot.value)

# %%
# NBVAL_CHECK_OUTPUT
def live_by_kind(layer_rows):
    """{layer kind, in the reader's language: the distinct numbers of tokens its layers hold}."""
    return {layer_kind_label(kind): sorted({r["slots_live"] for r in layer_rows if r["layer_kind"] == kind})
            for kind in sorted({r["layer_kind"] for r in layer_rows})}


print(f"prompt {tiny.session.current.prompt_tokens} tokens, {tiny.session.current.new_tokens} new")
print("without past recording:", refusal[:90], "...")
print("with past recording:   ", tiny.message_text)
print("tokens held before the crop:", live_by_kind(before))
print("tokens held after the crop: ", live_by_kind(tiny.session.current.layer_rows()))
display(score(guess_crop_works, crop_works, kind="choice", label="crop without past recording:"))
display(score(guess_crop_works_recorded, crop_works_recorded, kind="choice", label="crop with past recording:"))

# %% [markdown]
# Two things in the second dashboard are the crop's, not the last step's. The trace records a crop at the step it
# follows: the slots panel's last point (step 5) is drawn after the crop, so the line falls from step 4 straight
# to what the crop left, although step 5's own forward had added one token per layer first. And the bytes panel
# does not fall at all: `crop` slices each layer's tensors, and a slice is a view that keeps the whole storage
# until the next forward's `torch.cat` copies the kept tokens into new tensors (notebook 07, section 1). Both read
# from this run:

# %%
# NBVAL_CHECK_OUTPUT
run = tiny.session.current
slots = run.trace.slots_by_step()  # one row per step; the crop's re-reads are filed under the last step
last = slots[-1]["step"]
forward_slots = sum(e["slots_live"] for e in run.trace.updates if e["step"] == last and e.get("op") != "crop")
print(f"slots, all layers: step {last - 1}: {slots[-2]['slots_live']}; step {last}'s forward: {forward_slots}; "
      f"after crop(-2), drawn at step {last}: {slots[-1]['slots_live']}")
print(f"bytes held: {number(run.crop_bytes['before'])} B before the crop, {number(run.crop_bytes['after'])} B "
      f"after it; {number(run.crop_bytes['kept_by_views'])} B of that storage hold no token now")

# %% [markdown]
# **Takeaway.** With past recording the sliding layers keep every token until a crop (109 each before it, as
# many as the full layers: the green rows of the first map, and sliding-layer bytes above the full layers' in
# its bytes panel, since 4 of the 6 layers are sliding), and the crop then restricts them to the window again
# (7 tokens; orange = evicted, red = cropped on the second map) while the full layers keep 107. Without it, a
# sliding cache cannot be rolled back: the explorer refuses and says why, where plain transformers raises a
# `RuntimeError` from inside the layer (`DynamicSlidingWindowLayer.crop`).
#
# **Next.** Use the explorer to check your answers to the earlier notebooks' "Predict first" questions, starting
# from `00_start_here`; `kvlab explore` opens the same app in a browser tab.
