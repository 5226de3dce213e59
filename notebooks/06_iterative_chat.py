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
# # 06 · Iterative chat: one cache for the whole conversation
#
# **Learning goal.** After this notebook you can reuse one cache across the turns of a chat, say how many
# tokens each turn really prefills, and recognise the one way this silently goes wrong: a chat template that
# renders earlier turns differently from how they were generated.
#
# **In kvlab's words.** A chat prompt is the whole conversation so far. With a fresh cache every turn, the
# model re-reads all of it each time. Pass the *same* cache to every `generate` call together with the whole
# conversation's ids, and transformers prefills only `ids[cache_length:]`: the end of the last reply, the new
# user message, the assistant header. That shortcut rests on one assumption nobody checks: that the first
# `cache_length` ids of the new prompt are the very tokens the cache holds keys and values for.
# `kvlab.chat.ChatSession` remembers the ids it fed into the cache and compares them every turn.
#
# SmolLM2-135M-Instruct with its ChatML template, greedy decoding, CPU.

# %%
import torch

import kvlab
from kvlab.chat import THINK_DROPPING_TEMPLATE, ChatSession, chat, first_mismatch
from kvlab.plots.turns import alignment_counts, plot_id_alignment, plot_turns

torch.manual_seed(0)
model, tokenizer = kvlab.load("smollm2")
QUESTIONS = [
    "What does a KV cache store? One sentence.",
    "Why does that make generation faster?",
    "What does it cost in exchange?",
]
SYSTEM = ("You are a patient tutor who explains how language models run on ordinary computers. Keep every "
          "answer short and concrete, avoid jargon where a plain word will do, and when you use a technical term, "
          "say in a few words what it means. The learner is a programmer who knows Python but has never looked "
          "inside a transformer. They care about memory, speed, and what can go wrong.")
NEW_TOKENS = 16

# %% [markdown]
# ## 1. Three turns: one reused cache vs a fresh cache per turn
#
# **Predict first.** A system prompt of about 80 tokens opens the conversation, so by turn 3 it is well over a
# hundred tokens long. With a fresh cache, turn 3 prefills all of it. With the reused cache, how many tokens
# does turn 3 prefill? Roughly the new question plus what else? And will the answers differ?

# %%
reused = chat(model, tokenizer, QUESTIONS, system=SYSTEM, max_new_tokens=NEW_TOKENS)
fresh = chat(model, tokenizer, QUESTIONS, system=SYSTEM, max_new_tokens=NEW_TOKENS, reuse=False)

# %%
# NBVAL_CHECK_OUTPUT
print("turn  prompt  reused  prefilled(reuse)  prefilled(fresh)  same reply")
for a, b in zip(reused.turns, fresh.turns):
    print(f"{a.index + 1:>4}  {a.prompt_tokens:>6}  {a.reused_tokens:>6}  {a.prefilled_tokens:>16}  "
          f"{b.prefilled_tokens:>16}  {a.reply_ids == b.reply_ids}")
print("cache length after turn 3:", reused.cache.get_seq_length(), "= ids the session tracked:", len(reused.cached_ids))

# %%
for turn in reused.turns:
    print(f"turn {turn.index + 1}: {turn.reply!r}")

# %%
plot_turns({"one reused cache": reused, "fresh cache per turn": fresh},
           title=f"SmolLM2, {len(QUESTIONS)} turns, {NEW_TOKENS} new tokens each")

# %%
# Timings (not checked: they depend on the machine and its load).
for name, session in {"reused": reused, "fresh": fresh}.items():
    firsts = ", ".join(f"{t.prefill_seconds * 1e3:.0f}" for t in session.turns)
    print(f"{name:>6}: time to first token per turn (ms): {firsts}; whole chat {sum(t.seconds for t in session.turns):.2f} s")
saved = sum(b.prefill_seconds - a.prefill_seconds for a, b in zip(reused.turns, fresh.turns))
print(f"prefill time saved over the chat: {saved * 1e3:.0f} ms")

# %% [markdown]
# The reused cache prefills the new user turn and the assistant header, plus two things from before: the last
# token of the previous reply (`generate` produced it but never fed it back, so the cache does not hold it) and
# the end-of-turn marker `<|im_end|>\n` the template closes that reply with. (Replies here stop at 16 tokens,
# mid-sentence, to keep the notebook fast.) The fresh cache prefills the whole, growing conversation. Same tokens, less work. On a 135M model and a short chat the time
# saved is milliseconds; it grows with the conversation and the model (notebook 08 makes the prefix long).

# %% [markdown]
# ## 2. When the template rewrites history
#
# Some chat templates do not render a past assistant turn the way it was generated. Qwen3's, with thinking
# disabled, opens every assistant turn with an empty `<think>\n\n</think>\n\n` block, but renders *earlier*
# assistant turns without it. The guide warns about exactly this: re-encoding can drop or change such tokens,
# and the cache then holds keys and values for tokens that are no longer in the prompt.
#
# `THINK_DROPPING_TEMPLATE` is SmolLM2's ChatML reshaped to behave that way, so we can watch it on our model.

# %%
# NBVAL_CHECK_OUTPUT
probe = ChatSession(model, tokenizer, chat_template=THINK_DROPPING_TEMPLATE, max_new_tokens=NEW_TOKENS)
probe.ask(QUESTIONS[0])
probe.messages.append({"role": "user", "content": QUESTIONS[1]})
turn2_ids = probe.prompt_ids()[0].tolist()  # what turn 2 would feed generate
part = first_mismatch(probe.cached_ids, turn2_ids).position
print("the cache was fed:  ", repr(tokenizer.decode(probe.cached_ids[part - 5:part + 12])))
print("turn 2 renders:     ", repr(tokenizer.decode(turn2_ids[part - 5:part + 12])))
print(alignment_counts(probe.cached_ids, turn2_ids))

# %%
plot_id_alignment(probe.cached_ids, turn2_ids, title="Turn 2: the ids the cache holds vs the new prompt's ids")

# %% [markdown]
# **Predict first.** The cache holds turn 1 *with* the think block; the turn-2 prompt spells turn 1 *without*
# it. Plain transformers prefills `prompt[cache_length:]` anyway. Does it raise? Does the answer to question 2
# change compared with a fresh cache?

# %%
silent = chat(model, tokenizer, QUESTIONS[:2], chat_template=THINK_DROPPING_TEMPLATE, on_mismatch="ignore",
              max_new_tokens=NEW_TOKENS)
reference = chat(model, tokenizer, QUESTIONS[:2], chat_template=THINK_DROPPING_TEMPLATE, reuse=False,
                 max_new_tokens=NEW_TOKENS)

# %%
# NBVAL_CHECK_OUTPUT
stale = silent.turns[1].mismatch
print(f"no error raised; cached and prompt ids part at position {stale.position} of {stale.cached_tokens} cached")
print("reused (stale) cache:", repr(silent.turns[1].reply))
print("fresh cache:         ", repr(reference.turns[1].reply))
print("same reply:", silent.turns[1].reply_ids == reference.turns[1].reply_ids)

# %% [markdown]
# Everything from the first red position on is stale: the model attends to keys and values computed for the
# think block and for turn-1 text at shifted positions, and nothing tells you. kvlab compares the ids before
# generating. By default it refuses, naming the position and both tokens:

# %% tags=["raises-exception"]
# NBVAL_CHECK_OUTPUT
strict = ChatSession(model, tokenizer, chat_template=THINK_DROPPING_TEMPLATE, max_new_tokens=NEW_TOKENS)
strict.ask(QUESTIONS[0])
strict.ask(QUESTIONS[1])

# %% [markdown]
# **Predict first.** `on_mismatch="crop"` crops the cache back to the last matching position and lets
# `generate` prefill the rest. How many tokens will turn 2 prefill now, and will its answer match the fresh
# cache?

# %%
# NBVAL_CHECK_OUTPUT
repaired = chat(model, tokenizer, QUESTIONS[:2], chat_template=THINK_DROPPING_TEMPLATE, on_mismatch="crop",
                max_new_tokens=NEW_TOKENS)
turn = repaired.turns[1]
print(f"kept {turn.reused_tokens} cached tokens, cropped {turn.mismatch.cached_tokens - turn.mismatch.position}, "
      f"prefilled {turn.prefilled_tokens} of {turn.prompt_tokens}")
print("same reply as the fresh cache:", turn.reply_ids == reference.turns[1].reply_ids)
print("crops logged in the trace:", [c["n"] for c in repaired.cache.trace.crops])

# %% [markdown]
# ## Takeaway
#
# - Reusing one cache across turns is one argument: `generate(conversation_ids, cache=cache)`. Each turn then
#   prefills only what is new; the answers are the ones a fresh cache gives.
# - The reuse is only correct if the cached ids are a prefix of the new prompt's ids. A template that drops or
#   rewrites tokens of earlier turns (think blocks, whitespace, a reply that re-tokenizes differently) breaks
#   that **silently** in plain transformers.
# - kvlab keeps the ids it fed into the cache and checks them: raise, warn, or crop back to the common prefix.
#
# **Next:** [07 · Crop and rollback](07_crop_and_rollback.ipynb): what `crop` does to each kind of layer, and a
# speculative-decoding loop that rolls rejected tokens back out of the cache.
