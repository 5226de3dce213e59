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
# # 09 · Where tensors live during `generate`
#
# **Learning goal.** After this notebook you can run the guide's "keep the inputs on the CPU" sample, say
# which tensors `generate` keeps for itself and which it hands to each forward call (with their device, dtype
# and shape), and count the input signatures a tracing compiler would meet with a growing and a fixed-size cache.
#
# **In kvlab's words.** `generate` is a loop around `forward`. It keeps its own bookkeeping (the growing
# sequence of ids, the attention mask) on the device of the ids you passed in. Before each call it slices out
# what that one forward consumes (the new ids, their positions, a mask) and moves only those onto the model's
# device (transformers 5.24, `prepare_inputs_for_generation`). The cache is not an input that moves: it lives
# where the layers wrote it. `kvlab.measure.devices.log_forward_inputs` puts a forward pre-hook on the model
# (`register_forward_pre_hook(..., with_kwargs=True)`, removed when the block ends) and records every tensor
# each call receives.
#
# SmolLM2-135M-Instruct, greedy decoding, on a machine **without an accelerator**: everything here is on the
# CPU, which limits what can be measured (section 1 says exactly what).

# %%
# %matplotlib inline
import warnings

import ipywidgets as widgets
import torch
import transformers

import kvlab
from kvlab.i18n import cache_kind_label
from kvlab.live import live
from kvlab.measure.devices import log_forward_inputs
from kvlab.plots.forward_inputs import plot_forward_shapes
from kvlab.predictions import score

warnings.filterwarnings("ignore", message=".*past_key_values.*deprecated")  # transformers 5.24 spells it `cache=`
transformers.logging.set_verbosity_error()
torch.manual_seed(0)
model, tokenizer = kvlab.load("smollm2")
print("model:", model.device, model.dtype, "| accelerator available:", torch.cuda.is_available(),
      "| transformers", transformers.__version__)

# %% [markdown]
# ## 1. Keep the inputs on the CPU (Mantenha os tensores de geração na CPU)
#
# The guide's sample tokenizes the prompt and does **not** call `.to(model.device)`: the inputs stay on the
# CPU, `generate` moves to the model's device only what each forward consumes, and the output comes back on
# the device of the inputs.

# %%
# NBVAL_CHECK_OUTPUT
inputs = tokenizer("A generation loop keeps its tensors on", return_tensors="pt")  # no .to(model.device)
output = model.generate(**inputs, do_sample=False, max_new_tokens=5)
print(output.device)
print(tokenizer.decode(output[0]))

# %% [markdown]
# **What this measures here, and what it does not.** On this machine the model is on the CPU too, so `cpu` is
# the only answer possible: the output is on the inputs' device, but so is everything else. The guide's point is
# about accelerators: on a GPU, Neuron or TPU device, the growing sequence and mask stay on the CPU while each
# forward's inputs are moved to the device, and the output comes back to the CPU. That claim is **not measured
# here** (no accelerator). What can be measured on a CPU is the other half: what each forward call receives,
# and how its shapes change from call to call.
#
# **Predict first.** The same sample, now watched. We generate 5 tokens after a 7-token prompt. How many
# forward calls will there be? The first call receives the 7 prompt ids; how many ids will `input_ids` hold in
# each call after it?

# %%
guess_calls = None  # forward calls for 5 new tokens: your guess
guess_ids = None  # ids in `input_ids` of each call after the first: your guess

# %%
with kvlab.watch(model) as watch, log_forward_inputs(model) as log:
    output = model.generate(**inputs, do_sample=False, max_new_tokens=5)

# %%
# NBVAL_CHECK_OUTPUT
print(f"{log.calls} forward calls for {output.shape[-1] - inputs.input_ids.shape[-1]} new tokens; "
      f"the cache ({watch.trace.meta['cache_class']}) holds {watch.trace.final_layers()[0]['logical_length']} tokens per layer")
for row in log.table():
    print(f"call {row['call']}: {row['name']:<22} {row['device']:<5} {row['dtype']:<8} {row['shape']}")
print("devices seen, per input:", log.devices())

# %%
# NBVAL_CHECK_OUTPUT
(later_ids,) = set(log.lengths("input_ids"))  # input_ids' length, one value for every call after the prefill
display(score(guess_calls, log.calls, kind="count", label="forward calls:"))
display(score(guess_ids, later_ids, kind="count", label="ids in input_ids, each call after the first:"))

# %% [markdown]
# Five forwards for five tokens: the prefill produces the first token, each later call one more. `forward` never
# sees the whole sequence again: after the prefill it gets one id `(1, 1)`, its position, and the cache, whose
# keys (logged as the call begins) grow by one slot per call. The fifth token is never fed back, so the cache ends
# holding 7 + 4 = 11 tokens per layer. No attention mask reaches the model at all: the tokenizer's mask is all
# ones (no padding), so `generate` drops it (transformers sets `attention_mask` to None when every entry is 1)
# and the model builds its causal mask itself. On this CPU-only machine every device is `cpu`.

# %% [markdown]
# ## 2. A fixed-shape cache: what a tracing compiler sees
#
# A traced backend turns a forward into a graph specialised to its inputs. `torch.compile` guards on their
# shapes, dtypes and devices and recompiles when a guard fails; by default, once a shape has changed, it tries a
# graph that lets that size vary (source: PyTorch docs, "Dealing with Recompilations", torch.compile's
# programming model). CUDA graphs replay one captured shape on fixed memory addresses (source: NVIDIA's CUDA
# Graph guide, "PyTorch CUDA Graph Integration"). Either way, every new input signature is a possible new trace.
#
# **Predict first.** We generate 13 new tokens: 13 forward calls, the prefill and then 12 decoding calls. Over
# those 12 decoding calls, how many distinct input signatures will the default cache produce? And with
# `cache_implementation="static"`?

# %%
guess_dynamic = None  # distinct signatures over the 12 decoding calls, default cache: your guess
guess_static = None  # the same with cache_implementation="static": your guess

# %%
vars(model).pop("_previous_max_cache_length", None)  # forget earlier static sizes ("Try it" below shows why)
logs = {}
with log_forward_inputs(model) as logs["dynamic (default)"]:
    model.generate(**inputs, do_sample=False, max_new_tokens=13)
with log_forward_inputs(model) as logs['cache_implementation="static"']:
    model.generate(**inputs, do_sample=False, max_new_tokens=13, cache_implementation="static")

# %%
# NBVAL_CHECK_OUTPUT
for kind, kind_log in logs.items():
    distinct, calls = kind_log.decoding_signatures()
    print(f"{kind:>29}: {distinct} distinct signature{'s' * (distinct != 1)} over {calls} decoding calls "
          f"({kind_log.distinct_signatures()} counting the prefill); inputs: {kind_log.names()}")
static_log = logs['cache_implementation="static"']
print("static call 1:", [(r.name, r.dtype, r.shape) for r in static_log if r.call == 1])

# %%
# NBVAL_CHECK_OUTPUT
display(score(guess_dynamic, logs["dynamic (default)"].decoding_signatures()[0], kind="count",
              label="default cache, distinct decoding signatures:"))
display(score(guess_static, static_log.decoding_signatures()[0], kind="count",
              label="static cache, distinct decoding signatures:"))

# %%
plot_forward_shapes(logs, title="Sequence length of each forward input, per call")

# %% [markdown]
# With the default `DynamicCache` the cache's keys grow by one slot per call, so each of the 12 decoding calls
# has a signature of its own: a traced backend would re-trace every step (or fall back to dynamic shapes). With
# `cache_implementation="static"` the cache allocates its slots up front: `generate` sizes it at `max_length - 1`
# = 7 + 13 - 1 = 19 slots (the 7 prompt tokens and the 12 new ones fed back, as the call-1 shapes show), and
# builds a 4-D boolean mask of that same fixed width `(1, 1, 1, 19)`, so all 12 decoding calls share
# **one** signature: one graph, captured once, replayed every step. The prefill adds a signature of its own in
# both runs (the figure titles leave it out; counted, it makes 13 and 2). In the figure, inputs of the same length
# at every call (`input_ids` and `position_ids`; the static cache's keys and its mask) are drawn a little apart
# sideways, so that neither hides the other. That is why the guide pairs
# a static cache with `torch.compile`, and why `generate` keeps its own growing tensors off the traced path.

# %% [markdown]
# ### Try it: signatures per cache and length
#
# Choose a cache and a number of new tokens: the figure re-runs `generate` on the 7-token prompt under
# `log_forward_inputs` and draws each input's length per call.
#
# With `"static"`, look at the width: `generate` builds each new static cache with the largest `max_cache_len` it
# has used on this model so far (transformers keeps it, `_prepare_static_cache`, so that a compiled graph can be
# reused). After section 2's 13-token run, the default 8 new tokens (which need 7 + 7 = 14 slots) still get 19.
# (That is why section 2's cell starts by removing `model._previous_max_cache_length`: run after this control with
# more new tokens, it would otherwise get a wider cache than 19.)

# %%
def signatures(cache_implementation, new_tokens):
    with log_forward_inputs(model) as run_log:
        model.generate(**inputs, do_sample=False, max_new_tokens=new_tokens, cache_implementation=cache_implementation)
    return plot_forward_shapes({f'cache_implementation="{cache_implementation}"': run_log},
                               title=f"{new_tokens} new tokens after a 7-token prompt")  # fmt: skip


live(signatures,
     cache_implementation=widgets.Dropdown(options=[(cache_kind_label(k), k) for k in ("dynamic", "static")], value="static", description="cache"),
     new_tokens=widgets.IntSlider(value=8, min=2, max=24, step=2, continuous_update=False, description="new tokens"))

# %% [markdown]
# ## Takeaway
#
# - Leave the inputs on the CPU and `generate` returns its output there: here `output.device` is `cpu`, as it
#   must be on a machine without an accelerator. The guide's accelerator case (forward inputs moved to the
#   device, the growing tensors left on the CPU) is not measured here.
# - After the prefill, each forward gets one id, its position and the cache (and, with a static cache, a mask of
#   fixed width). With the default cache the cache grows every call; with a static cache no input changes shape.
# - Fixed shapes give one signature for all of decoding (12 decoding calls, 1 signature here; 2 with the
#   prefill), which is what traced compiler backends need.
#
# **Next:** [10 · Choose your cache](10_choose_your_cache.ipynb): the guide's comparison table, measured here,
# and a KV-size calculator for big models.
