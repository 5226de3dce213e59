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
# **Learning goal.** Read a DynamicCache layer by layer; see that full-attention layers grow by one token per
# step forever while sliding-window layers stop at their window and start evicting; know why the prefill is the
# memory peak of a sliding model.
#
# **In kvlab's words.** `DynamicCache` is transformers' default: it allocates nothing up front and, at every
# step, concatenates the new token's keys and values onto each layer. What a layer keeps depends on its kind.
# A *full* layer keeps everything. A *sliding* layer (Gemma 3: 5 of every 6 layers, window 512) only lets a token
# attend to the last 512 positions, so older keys are useless and the layer drops them. kvlab's instrumented
# cache logs every layer update into a `Trace`: live slots, evicted tokens and bytes held per layer per step.

# %%
# %matplotlib inline
import torch
import transformers

import kvlab
from kvlab.measure import formula, text
from kvlab.plots import growth, occupancy

torch.manual_seed(0)
transformers.logging.disable_progress_bar()
smollm2, smollm2_tokenizer = kvlab.load("smollm2")
gemma, gemma_tokenizer = kvlab.load("gemma3")

# %% [markdown]
# ## 1. A model of full layers: SmolLM2
#
# **Predict first.** After a 40-token prompt and 8 generated tokens, how many tokens does each of SmolLM2's
# 30 layers hold? Do any two layers differ?

# %%
# NBVAL_CHECK_OUTPUT
result = kvlab.run(smollm2, smollm2_tokenizer, text.prompt_ids(smollm2_tokenizer, 40), cache="dynamic",
                   max_new_tokens=8)
table = result.trace.layer_table()
print("tokens per layer:", sorted({row["logical_length"] for row in table}), "in", len(table), "layers")
print("bytes per layer: ", sorted({row["bytes_held"] for row in table}))
print("steps:", result.trace.summary()["steps"], "(the prefill, then one per new token but the last)")

# %% [markdown]
# Every layer holds the same 47 tokens (40 + 8 − 1: the last token is returned, never fed back). A model of full
# layers grows uniformly, so its memory is `tokens × bytes per token` and nothing else to know.
#
# ## 2. A model with sliding layers: Gemma 3 past its 512-token window
#
# Gemma 3 270M has 18 layers: `[sliding × 5, full] × 3`, window 512, one KV head of 256. We give it a prompt of
# 520 tokens of the reference text (longer than the window) and generate 24 more.
#
# **Predict first.** At the end, how many tokens does a sliding layer hold, and a full layer? Which step holds
# the most bytes: the prefill or the last step?

# %%
gemma_prompt = text.prompt_ids(gemma_tokenizer, 520)  # (1, 520)
run = kvlab.run(gemma, gemma_tokenizer, gemma_prompt, cache="dynamic", max_new_tokens=24)
trace = run.trace

# %%
# NBVAL_CHECK_OUTPUT
kinds = [row["kind"] for row in trace.layer_table()]
print({kind: kinds.count(kind) for kind in dict.fromkeys(kinds)}, "window", gemma.config.sliding_window)
for row in trace.layer_table()[4:7]:
    print(f"layer {row['layer_idx']:2d} {row['kind']:>7}: seen {row['logical_length']}, live {row['slots_live']}, "
          f"evicted {row['tokens_evicted']}, {row['bytes_held']:,} bytes")

# %% [markdown]
# The sliding layer has seen all 543 tokens but keeps 511 (the window minus the token being added, which
# attention reads from the new states directly); the full layer keeps all 543. Its 1,048,576 bytes are 512
# tokens' worth: the kept 511 are a view into a 512-token tensor, and kvlab counts the allocation, not the view.

# %%
occupancy.plot_occupancy(trace, title="Gemma 3, DynamicCache: live slots and evictions per layer (520-token prompt)")

# %% [markdown]
# Rows are layers, columns steps. Every sixth row (the full layers) keeps deepening; the sliding rows are pinned
# at 511 from step 1 on, while their eviction count climbs by one per step.
#
# **Predict first.** Plot total bytes against tokens. Where is the peak?

# %%
# NBVAL_CHECK_OUTPUT
summary = trace.summary()
by_step = trace.bytes_by_step()
print(f"prefill: {by_step[0]:,} bytes;  after step 1: {by_step[1]:,};  final: {by_step[-1]:,}")
peak_step = by_step.index(summary["peak_bytes"])
print(f"peak: {summary['peak_bytes']:,} bytes at step {peak_step};  tokens evicted: {summary['tokens_evicted']:,}")
print(f"formula, windows applied, at {trace.final_layers()[0]['logical_length']} tokens: "
      f"{formula.kv_bytes(gemma.config, trace.final_layers()[0]['logical_length']):,} bytes")

# %%
growth.plot_growth(trace, expected=formula.expected_curves(gemma.config, 560),
                   title="Gemma 3 DynamicCache: bytes against tokens (dotted: formula from 0 tokens)")

# %% [markdown]
# The dotted curves show what the formula predicts from the first token on: the sliding part ramps up to the
# window and then stays flat, while the full part (only 3 layers) keeps its slope; the measured lines (from 520
# tokens on) sit on them. The one surprise is the **prefill**: for the 520 prompt tokens the sliding layers keep
# all 520 keys and values (attention needed them all in that forward), and only the next update trims them to
# the window. So a sliding-window model's peak cache memory is set by the longest *prompt*, not by how long it
# generates: 8 tokens × 15 layers × 2 KiB here, but a 32k-token prompt would hold 32k tokens in every sliding
# layer for a moment.
#
# ## Takeaway
#
# - DynamicCache grows every full layer by one token per step; its bytes match the formula exactly.
# - Sliding layers keep `window − 1` live tokens and evict the rest; on Gemma 3 past 512 tokens, 15 of 18 layers
#   stop growing, so memory grows at 3/18 of the full-attention rate.
# - The prefill is the peak: a long prompt is held whole in the sliding layers until the first decode step.
#
# **Next:** [02 · StaticCache](02_static_cache.ipynb): allocate everything up front, pay for empty slots, and
# let `torch.compile` see fixed shapes.
