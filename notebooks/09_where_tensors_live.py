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
# **Learning goal.** After this notebook you can say which tensors `generate` keeps for itself and which it
# hands to each forward call, on which device, with which dtype and shape, and why that matters to compiler
# backends that trace the forward.
#
# **In kvlab's words.** `generate` is a loop around `forward`. It keeps its own bookkeeping (the growing
# sequence of ids, the attention mask) on the device of the ids you passed in. Before each call it slices out
# what that one forward consumes (the new ids, their positions, a mask) and moves only those onto the model's
# device (transformers 5.24, `prepare_inputs_for_generation`, step 6). The cache is not an input that moves: it
# lives where the layers wrote it. `kvlab.devices.log_forward_inputs` puts a forward pre-hook on the model
# (`register_forward_pre_hook(..., with_kwargs=True)`, removed when the block ends) and records every tensor
# each call receives.
#
# SmolLM2-135M-Instruct, greedy decoding, CPU.

# %%
import torch

import kvlab
from kvlab.devices import log_forward_inputs
from kvlab.plots.forward_inputs import plot_forward_shapes

torch.manual_seed(0)
model, tokenizer = kvlab.load("smollm2")
prompt = tokenizer("A generation loop keeps its tensors on", return_tensors="pt").input_ids  # (1, 7)
print("prompt ids:", tuple(prompt.shape), prompt.dtype, prompt.device, "| model:", model.device, model.dtype)

# %% [markdown]
# ## 1. Every forward input of one `generate`
#
# **Predict first.** We generate 5 tokens after a 7-token prompt. How many forward calls will there be?
# What shape will `input_ids` have in the first call, and in the others? Does `forward` receive the growing
# sequence at all?

# %%
with log_forward_inputs(model) as log:
    result = kvlab.run(model, tokenizer, prompt, max_new_tokens=5)

# %%
# NBVAL_CHECK_OUTPUT
print(f"{log.calls} forward calls for {len(result.generated_token_ids)} new tokens")
for row in log.table():
    print(f"call {row['call']}: {row['name']:<22} {row['device']:<5} {row['dtype']:<8} {row['shape']}")
print("devices seen, per input:", log.devices())

# %% [markdown]
# Five forwards for five tokens: the prefill produces the first token, each later call one more. `forward`
# never sees the whole sequence again: after the prefill it gets one id `(1, 1)`, its position, and the cache,
# whose keys (logged as the call begins) grow by one slot per call. The fifth token is never fed back. No attention
# mask reaches the model at all: with a DynamicCache and no padding, `generate` leaves the causal mask to the
# model. On this CPU-only machine every device is `cpu`; on a GPU the same log would show the model's device
# for these forward inputs, while `generate`'s own sequence and mask stay on the device of `prompt`
# (not measured here: this machine has no accelerator).

# %% [markdown]
# ## 2. A fixed-shape cache: what a tracing compiler sees
#
# A traced backend (`torch.compile`, and even more so CUDA graphs or XLA/Neuron devices) turns a forward into
# a graph specialised to the shapes, dtypes and devices of its inputs. A new signature means a new trace or a
# recompilation; an input on the wrong device means a copy inside every step.
#
# **Predict first.** Over 12 decoding steps, how many distinct input signatures will a DynamicCache produce?
# A StaticCache with `max_cache_len=32`?

# %%
logs = {}
for kind, options in {"dynamic": {}, "static": {"max_cache_len": 32}}.items():
    with log_forward_inputs(model) as logs[kind]:
        kvlab.run(model, tokenizer, prompt, cache=kind, max_new_tokens=13, **options)

# %%
# NBVAL_CHECK_OUTPUT
for kind, kind_log in logs.items():
    decoding = kind_log.signatures()[1:]  # call 0 is the prefill
    print(f"{kind:>7}: {len(set(decoding))} distinct signatures over {len(decoding)} decoding calls; "
          f"inputs: {kind_log.names()}")
print("static call 1:", [(r.name, r.dtype, r.shape) for r in logs["static"] if r.call == 1])

# %%
plot_forward_shapes(logs, title="Sequence length of each forward input, per call")

# %% [markdown]
# With a DynamicCache the cache's keys grow by one slot per call, so every decoding call has a new signature:
# a traced backend would re-trace every step (or fall back to dynamic shapes). The StaticCache allocates all 32
# slots up front and `generate` builds a 4-D boolean mask of the same fixed width `(1, 1, 1, 32)`, so all 12
# decoding calls share **one** signature: one graph, captured once, replayed every step. That is why the guide
# recommends a static cache for `torch.compile`, and why `generate` keeps its own growing tensors off the
# traced path.

# %% [markdown]
# ## Takeaway
#
# - `generate` keeps the growing sequence and mask on the input's device and moves only what one forward
#   consumes (new ids, positions, mask) onto the model's device; the cache stays where its layers wrote it.
# - After the prefill, each forward gets one id, its position and the cache. What varies between calls is the
#   cache's length, and with a StaticCache even that is fixed.
# - Fixed shapes (static cache, fixed-width mask) give one signature for all of decoding, which is what traced
#   compiler backends need.
#
# **Next:** [10 · Choose your cache](10_choose_your_cache.ipynb): the guide's comparison table, measured here,
# and a KV-size calculator for big models.
