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
# # 08 · Prefix caching: prefill a shared prefix once
#
# **Learning goal.** After this notebook you can prefill a long shared prefix (a system prompt, a document)
# once, answer several questions from copies of that cache, say what each copy costs in memory for a
# DynamicCache and a StaticCache, and avoid the one tokenization trap that makes the reuse silently wrong.
#
# **In kvlab's words.** Many prompts start the same way. The keys and values of that common start do not
# depend on what follows, so they can be computed once. Generating into a cache changes it, so each question
# gets its own `copy.deepcopy` of the prefilled cache; `generate(prefix_and_question_ids, cache=copy)` then
# prefills only the question. The shortcut is right only if the prefix's token ids are exactly the first ids
# of the full prompt, and string concatenation does not promise that.
#
# SmolLM2-135M-Instruct, greedy decoding, CPU.

# %%
import torch

import kvlab
from kvlab.plots.prefix import plot_prefix_answers
from kvlab.prefix import PrefixMismatchError, answer, answer_without_reuse, prefill_prefix

torch.manual_seed(0)
model, tokenizer = kvlab.load("smollm2")
SHOP = (
    "You answer questions for Wheelwright, a small bicycle repair shop, in one short sentence.\n"
    "Opening hours: Monday to Friday 9:00 to 18:00, Saturday 10:00 to 14:00, closed on Sundays and holidays.\n"
    "Prices: replacing an inner tube costs 12 euros and takes 20 minutes. Truing a wheel costs 18 euros. "
    "Brake pads cost 15 euros per pair, fitting included. A full service costs 65 euros and takes one day.\n"
    "We sell city bikes and cargo bikes, but no electric bikes. We rent cargo bikes for 30 euros a day.\n"
    "Payment by card or cash. Repairs are guaranteed for three months.\n"
)
QUESTIONS = [
    "Question: How much does it cost to replace an inner tube?\nAnswer:",
    "Question: Do you sell electric bikes?\nAnswer:",
    "Question: Are you open on Sunday?\nAnswer:",
]
NEW_TOKENS = 12

# %% [markdown]
# ## 1. Prefill once, into a DynamicCache and a StaticCache
#
# **Predict first.** The shop text is about 150 tokens. SmolLM2 keeps, per token, 30 layers × (keys + values) ×
# 3 heads × 64 dims × 4 bytes. How many bytes will the prefilled DynamicCache hold? A StaticCache sized for the
# prefix plus room for a question and an answer (`max_cache_len=224`)?

# %%
dynamic_prefix = prefill_prefix(model, tokenizer, SHOP, cache="dynamic")
static_prefix = prefill_prefix(model, tokenizer, SHOP, cache="static", max_cache_len=224)

# %%
# NBVAL_CHECK_OUTPUT
per_token = 30 * 2 * 3 * 64 * 4
print(f"prefix: {len(dynamic_prefix.ids)} tokens; {per_token:,} B per token")
print(f"DynamicCache: {dynamic_prefix.bytes:>9,} B = {dynamic_prefix.bytes // per_token} tokens' worth")
print(f"StaticCache:  {static_prefix.bytes:>9,} B = {static_prefix.bytes // per_token} slots' worth")

# %% [markdown]
# ## 2. Three questions, each from a deep copy
#
# **Predict first.** Without reuse, each question prefills the shop text again plus the question. With reuse,
# how many tokens does each answer prefill? Will any answer differ from the one without reuse? What does each
# copy cost in memory?

# %%
runs = {
    "dynamic, reused prefix": [answer(model, tokenizer, dynamic_prefix, q, NEW_TOKENS) for q in QUESTIONS],
    "static, reused prefix": [answer(model, tokenizer, static_prefix, q, NEW_TOKENS) for q in QUESTIONS],
    "no reuse": [answer_without_reuse(model, tokenizer, SHOP, q, NEW_TOKENS) for q in QUESTIONS],
}

# %%
# NBVAL_CHECK_OUTPUT
reference = runs["no reuse"]
for name, answers in runs.items():
    print(f"{name:>22}: prefilled {[a.prefilled_tokens for a in answers]}, copy bytes {answers[0].copy_bytes:,}, "
          f"same tokens as no reuse: {[a.token_ids == r.token_ids for a, r in zip(answers, reference)]}")
for q, a in zip(QUESTIONS, reference):
    print(f"{q.splitlines()[0]!r} -> {a.text!r}")

# %%
plot_prefix_answers(runs, title=f"{len(dynamic_prefix.ids)}-token prefix, {NEW_TOKENS} new tokens per answer")

# %%
# Timings (not checked: they depend on the machine and its load).
print(f"prefill of the prefix, once: dynamic {dynamic_prefix.seconds * 1e3:.0f} ms, static {static_prefix.seconds * 1e3:.0f} ms")
for name, answers in runs.items():
    firsts = ", ".join(f"{a.first_token_seconds * 1e3:.0f}" for a in answers)
    print(f"{name:>22}: time to first token (copy + prefill) {firsts} ms; whole answers "
          f"{sum(a.seconds for a in answers) * 1e3:.0f} ms")

# %% [markdown]
# Time to first token is where reuse pays: each reused answer copies the cache and prefills a dozen tokens
# instead of ~170 (on a shared CPU the numbers are noisy; the full answers are dominated by decoding, which
# reuse does not change). The copies hold exactly what was prefilled: the DynamicCache copy holds the prefix's tokens and nothing more
# (it grows while that answer generates), the StaticCache copy holds all 224 slots from the start, filled or
# not. Per question, that is the memory price of reuse: one copy alive while that answer is generated. The
# tokens are the same with and without reuse, because the keys and values of the prefix do not depend on what
# comes after it.

# %% [markdown]
# ## 3. The trailing-space trap
#
# A natural way to split a prompt is to keep `"...\nQuestion: "` as the prefix and append the question text.
#
# **Predict first.** The prefix now ends in a space. Tokenize prefix alone and prefix + question: do the ids
# line up? If they do not, what does plain transformers do with the cache: raise, or answer?

# %%
# NBVAL_CHECK_OUTPUT
spaced = prefill_prefix(model, tokenizer, SHOP + "Question: ")
question = "How much does it cost to replace an inner tube?\nAnswer:"
full = tokenizer(spaced.text + question).input_ids
print(f"prefix: {len(spaced.ids)} ids, ending with", tokenizer.convert_ids_to_tokens(spaced.ids[-3:]))
print("prefix+question has at the same place:", tokenizer.convert_ids_to_tokens(full[len(spaced.ids) - 3:len(spaced.ids) + 1]))

# %%
# NBVAL_CHECK_OUTPUT
unchecked = answer(model, tokenizer, spaced, question, NEW_TOKENS, check=False)  # what plain transformers does
correct = answer_without_reuse(model, tokenizer, spaced.text, question, NEW_TOKENS)
print("plain reuse: ", repr(unchecked.text))
print("no reuse:    ", repr(correct.text))
print("same tokens:", unchecked.token_ids == correct.token_ids)

# %% [markdown]
# The prefix was tokenized with a lone space token `Ġ` at its end; the full prompt spells the same space as
# part of `ĠHow`. `generate` assumes the first 163 ids are cached and feeds from id 163 on, so the model never
# sees the token `ĠHow`: position 162 holds the keys and values of a bare space instead. No error, a different
# answer. kvlab compares the ids first:

# %% tags=["raises-exception"]
# NBVAL_CHECK_OUTPUT
answer(model, tokenizer, spaced, question, NEW_TOKENS)

# %% [markdown]
# ## Takeaway
#
# - Prefill a shared prefix once, `copy.deepcopy` the cache per question, pass the full prompt's ids: each answer
#   prefills only its question, and the tokens equal those without reuse.
# - A DynamicCache copy costs the prefix's tokens; a StaticCache copy costs every slot of `max_cache_len`.
# - End the prefix on a token boundary (a newline, the end of a chat-template turn), never on a space. kvlab's
#   `answer` checks that the prefix ids are a token prefix and raises `PrefixMismatchError` when they are not.
#
# **Next:** [09 · Where tensors live](09_where_tensors_live.ipynb): what `generate` keeps on which device, and
# what each forward call receives.
