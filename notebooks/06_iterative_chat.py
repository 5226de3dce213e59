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
# **Learning goal.** After this notebook you can run a chat loop that passes one `DynamicCache` to every
# `generate` call, say how many tokens each turn really prefills, and recognise the one way this silently goes
# wrong: a chat template that renders earlier turns differently from how they were generated.
#
# **In kvlab's words.** A chat prompt is the whole conversation so far. With a fresh cache every turn, the
# model re-reads all of it each time. Pass the *same* cache to every `generate` call together with the whole
# conversation's ids, and transformers prefills only `ids[cache_length:]`: the end of the last reply, the new
# user message, the assistant header. That shortcut rests on one assumption nobody checks: that the first
# `cache_length` ids of the new prompt are the very tokens the cache holds keys and values for.
#
# SmolLM2-135M-Instruct with its ChatML template, greedy decoding, CPU.

# %%
# %matplotlib inline
import os
import warnings

import ipywidgets as widgets
import torch
from transformers import DynamicCache

import kvlab
from kvlab.measure.chat import THINK_DROPPING_TEMPLATE, ChatSession, first_mismatch, turn_prefills
from kvlab.live import live
from kvlab.measure import timing
from kvlab.plots.prefill_bars import plot_prefill_bars
from kvlab.plots.turns import alignment_counts, plot_id_alignment, plot_turn_prefills
from kvlab.predictions import score

warnings.filterwarnings("ignore", message=".*past_key_values.*deprecated")  # transformers 5.24 spells it `cache=`
torch.manual_seed(0)
model, tokenizer = kvlab.load("smollm2")
user_prompts = [
    "What does a KV cache store? One sentence.",
    "Why does that make generation faster?",
    "What does it cost in exchange?",
]
SYSTEM = ("You are a patient tutor who explains how language models run on ordinary computers. Keep every "
          "answer short and concrete, avoid jargon where a plain word will do, and when you use a technical term, "
          "say in a few words what it means. The learner is a programmer who knows Python but has never looked "
          "inside a transformer. They care about memory, speed, and what can go wrong.")
NEW_TOKENS = 16  # replies stop here, mid-sentence, to keep the notebook fast
QUICK = os.environ.get("KVLAB_QUICK") == "1"  # one timed repeat in the test suite; checked outputs hold either way

# %% [markdown]
# ## 1. One cache across the turns (Geração iterativa)
#
# The loop: create one empty `DynamicCache`, keep the conversation in a `messages` list, and each turn render
# the whole list with the chat template, generate with the same cache, decode only the new tokens, and append
# them as the assistant's message.

# %%
past_key_values = DynamicCache(config=model.config)
messages = [{"role": "system", "content": SYSTEM}]
for prompt in user_prompts:
    messages.append({"role": "user", "content": prompt})
    inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                           return_dict=True)
    input_length = inputs["input_ids"].shape[1]
    outputs = model.generate(**inputs, do_sample=False, max_new_tokens=NEW_TOKENS, past_key_values=past_key_values)
    completion = tokenizer.decode(outputs[0, input_length:], skip_special_tokens=True)
    messages.append({"role": "assistant", "content": completion})
    print(f"prompt {input_length} tokens, cache now {past_key_values.get_seq_length()}: {completion!r}")

# %% [markdown]
# The replies are wrong, and not only cut off at 16 tokens: a KV cache is not "a type of data storage device" but
# the keys and values of the tokens the model has already read (notebook 00), it makes generation faster by not
# recomputing them rather than by beating a CPU, and what it costs is memory, not money. SmolLM2-135M is a small
# model and gets such facts wrong; what this notebook watches is the cache, not the answers.
#
# **Predict first.** Turn 3's prompt is 170 tokens (printed above). A fresh cache would prefill all of it. How
# many tokens does turn 3 prefill with the reused cache?

# %%
guess = None  # tokens turn 3 prefills with the reused cache: your guess

# %% [markdown]
# The same loop inside `kvlab.watch`, once with the reused cache and once with a fresh `DynamicCache` each turn
# (the only change: the cache is created inside the loop). The additions only measure: a stopwatch around
# `generate`, and a streamer that notes when each new token arrives (`timing.DecodeClock`, passed as `streamer=`),
# whose first new token marks the end of the prefill. One reading per turn says little on a shared CPU, so both
# loops run 3 times, alternating (reused, fresh, reused, ...); each turn's times are summed up by their median and
# interquartile range (IQR) and compared as a ratio with its interval.

# %%
def run_chat(prompts, new_tokens, reuse):
    """The loop above; returns the replies, each turn's generate time and its time to the first new token (s)."""
    past_key_values = DynamicCache(config=model.config)
    messages, replies, seconds, first_token = [{"role": "system", "content": SYSTEM}], [], [], []
    for prompt in prompts:
        if not reuse:
            past_key_values = DynamicCache(config=model.config)
        messages.append({"role": "user", "content": prompt})
        inputs = tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_tensors="pt",
                                               return_dict=True)
        input_length = inputs["input_ids"].shape[1]
        clock = timing.DecodeClock()  # a streamer that only notes the time each new token arrives
        with timing.Stopwatch() as stopwatch:
            outputs = model.generate(**inputs, do_sample=False, max_new_tokens=new_tokens,
                                     past_key_values=past_key_values, streamer=clock)
        seconds.append(stopwatch.seconds)
        first_token.append(clock.prefill_seconds)
        replies.append(outputs[0, input_length:].tolist())
        messages.append({"role": "assistant", "content": tokenizer.decode(replies[-1], skip_special_tokens=True)})
    return replies, seconds, first_token


def per_turn(repeats, label):
    """One `Timing` per turn, from each repeat's list of per-turn seconds."""
    return [timing.Timing(label, list(times)) for times in zip(*repeats)]


REPEATS = 1 if QUICK else 3
reused_calls, reused_firsts, fresh_calls, fresh_firsts = [], [], [], []
for repeat in range(REPEATS):  # interleaved, so a busy moment of the machine hits both loops alike
    with kvlab.watch(model) as reused:
        reused_replies, seconds, first_token = run_chat(user_prompts, NEW_TOKENS, reuse=True)
    reused_calls.append(seconds)
    reused_firsts.append(first_token)
    with kvlab.watch(model) as fresh:
        fresh_replies, seconds, first_token = run_chat(user_prompts, NEW_TOKENS, reuse=False)
    fresh_calls.append(seconds)
    fresh_firsts.append(first_token)
# per turn: the repeats' times (the watches of the last repeat are kept for the counts below)
reused_turns, fresh_turns = per_turn(reused_calls, label="reused"), per_turn(fresh_calls, label="fresh")
reused_first, fresh_first = per_turn(reused_firsts, label="reused"), per_turn(fresh_firsts, label="fresh")

# %%
# NBVAL_CHECK_OUTPUT
reused_prefill = turn_prefills(reused.trace)  # one cache: one trace, one prefill per turn
fresh_prefill = [turn_prefills(trace)[0] for trace in fresh.traces]  # one cache (and trace) per turn
display(score(guess, reused_prefill[2], unit=" tokens", kind="count"))

# %%
# NBVAL_CHECK_OUTPUT
print(f"caches seen: {len(reused.traces)} reused vs {len(fresh.traces)} fresh")
print("tokens prefilled per turn, reused:", reused_prefill, "| fresh:", fresh_prefill)
print("same replies:", reused_replies == fresh_replies)
print("reused cache length at the end:", reused.caches[0].get_seq_length())

# %%
# Timings (not checked: they depend on the machine). Per turn: medians of 3 interleaved runs (1 in the test
# suite), and the ratio reused / fresh with its 95% interval; first to the first new token (the prefill), then
# the whole generate call.
first_token_verdicts = []  # one per turn, printed here and drawn under the figure
for turn, (fresh_turn, reused_turn) in enumerate(zip(fresh_first, reused_first), start=1):
    first_token_verdicts.append(timing.compare(fresh_turn, reused_turn, warn=False).verdict())
    print(f"turn {turn}, first token: {fresh_turn.describe()} fresh | {reused_turn.describe()} reused")
    print(f"    {first_token_verdicts[-1]}")
for turn, (fresh_turn, reused_turn) in enumerate(zip(fresh_turns, reused_turns), start=1):
    print(f"turn {turn}, whole call: {fresh_turn.describe()} fresh | {reused_turn.describe()} reused")
    print(f"    {timing.compare(fresh_turn, reused_turn, warn=False).verdict()}")

# %%
plot_prefill_bars({"one reused cache": list(zip(reused_prefill, reused_first)),
                   "fresh cache per turn": list(zip(fresh_prefill, fresh_first))},
                  "turn", "ms to first token (median, IQR)",
                  f"SmolLM2, {len(user_prompts)} turns, {NEW_TOKENS} new tokens each",
                  verdicts=first_token_verdicts)

# %% [markdown]
# Turn 1 prefills the same tokens either way (the cache is empty): the same work, so any difference between its
# two times is noise, and its interval should contain 1. From turn 2 on, the reused cache prefills only what
# the cache lacks: turn 2's prompt is 136 tokens and the cache held 117 after turn 1 (102 + 16 new - 1), so 19.
# Those are the new user turn and the assistant header, plus two things from before: the last token of the
# previous reply (`generate` produced it but never fed it back, so the cache does not hold it) and the
# end-of-turn marker `<|im_end|>\n` the template closes that reply with. The fresh cache prefills the whole,
# growing conversation. Same replies, less work: the token counts above are exact.
#
# The time to the first new token is where that work goes: it is the prefill, one forward over 19 tokens with
# the reused cache against 136 or 170 with a fresh one. Its verdicts are printed above the figure and drawn under
# it; an interval that contains 1 means no detectable difference. The whole `generate` call adds 15 decoding
# forwards after the prefill (16 new tokens), the same with either cache, so there the saving is a smaller share
# of the time: its printed verdicts say whether it still shows beyond noise on this run. The work saved grows with
# the conversation, since a fresh cache re-reads every earlier turn and the reused one only the new turn: 117
# tokens not prefilled again at turn 2, 151 at turn 3 (notebook 08 makes a long prefix). Whether the time saved
# grows too is another comparison, turn against turn, which these verdicts do not make: each weighs the two
# caches within one turn, and two turns' intervals that overlap tell no growth apart from noise.

# %% [markdown]
# ## Live: turns and reply length
#
# Move the number of turns and the new tokens per turn: both loops run again (SmolLM2, 2 × turns `generate`
# calls) and the bars show the tokens each turn prefilled, read from the watched traces. Longer replies make every
# later fresh prefill longer; the reused cache's prefill stays at the new turn's size.

# %%
MORE_PROMPTS = user_prompts + ["Give one example.", "Summarise in five words."]


def prefill_per_turn(turns, new_tokens):
    with kvlab.watch(model) as reused:
        run_chat(MORE_PROMPTS[:turns], new_tokens, reuse=True)
    with kvlab.watch(model) as fresh:
        run_chat(MORE_PROMPTS[:turns], new_tokens, reuse=False)
    return plot_turn_prefills({"one reused cache": turn_prefills(reused.trace),
                               "fresh cache per turn": [turn_prefills(trace)[0] for trace in fresh.traces]},
                              title=f"SmolLM2, {turns} turns, {new_tokens} new tokens each")


live(prefill_per_turn,
     turns=widgets.IntSlider(value=3, min=1, max=len(MORE_PROMPTS), continuous_update=False, description="turns"),
     new_tokens=widgets.IntSlider(value=4, min=2, max=24, step=2, continuous_update=False, description="new tokens"))

# %% [markdown]
# ## 2. When the template rewrites history
#
# The guide warns that `apply_chat_template` may not render a past assistant turn the way it was generated:
# models that reason inside `<think> ... </think>` can lose those tokens when the conversation is re-encoded, and
# the cache then holds keys and values for tokens that are no longer in the prompt. Qwen3's chat template with
# thinking disabled is written that way: its generation prompt opens the assistant turn with an empty
# `<think>\n\n</think>\n\n` block, while earlier assistant turns are rendered from the text after `</think>`
# (source: the `chat_template` of Qwen/Qwen3-235B-A22B on the Hugging Face Hub, read line by line in the Hugging
# Face blog post "The 4 Things Qwen-3's Chat Template Teaches Us"; this notebook does not load Qwen3).
# `THINK_DROPPING_TEMPLATE` is SmolLM2's ChatML reshaped to behave that way, so we can watch it on our model: the
# cells after your guess print where the ids the cache was fed and the turn-2 prompt part. The loop is the one
# above with `chat_template=` added.
#
# **Predict first.** Plain transformers prefills `prompt[cache_length:]` without comparing any ids. Will turn
# 2's reply on the reused cache be the same as a fresh cache's reply to the same prompt (True or False)?

# %%
guess_same_reply = None  # True if the reused cache gives the fresh cache's reply: your guess

# %%
past_key_values = DynamicCache(config=model.config)
messages, prompts = [], []
for prompt in user_prompts[:2]:
    messages.append({"role": "user", "content": prompt})
    inputs = tokenizer.apply_chat_template(messages, chat_template=THINK_DROPPING_TEMPLATE, add_generation_prompt=True,
                                           return_tensors="pt", return_dict=True)
    prompts.append(inputs["input_ids"][0].tolist())
    cached_ids = outputs[0, :past_key_values.get_seq_length()].tolist() if len(prompts) > 1 else []
    input_length = inputs["input_ids"].shape[1]
    outputs = model.generate(**inputs, do_sample=False, max_new_tokens=NEW_TOKENS, past_key_values=past_key_values)
    completion = tokenizer.decode(outputs[0, input_length:], skip_special_tokens=True)
    messages.append({"role": "assistant", "content": completion})
stale_reply = completion
# The turn-2 prompt again, on a fresh cache: what the answer should have been.
reference = model.generate(**inputs, do_sample=False, max_new_tokens=NEW_TOKENS,
                           past_key_values=DynamicCache(config=model.config))
fresh_reply = tokenizer.decode(reference[0, input_length:], skip_special_tokens=True)

# %%
# NBVAL_CHECK_OUTPUT
stale = first_mismatch(cached_ids, prompts[1])  # kvlab: the ids the cache was fed vs the turn-2 prompt
print(f"generate raised nothing; cached and prompt ids part at position {stale.position} "
      f"of {stale.cached_tokens} cached")
print("the cache was fed:", repr(tokenizer.decode(cached_ids[stale.position - 5:stale.position + 12])))
print("turn 2 renders:   ", repr(tokenizer.decode(prompts[1][stale.position - 5:stale.position + 12])))
counts = alignment_counts(cached_ids, prompts[1])
print(f"positions that match: {counts['match']}, differ: {counts['differ']}, new: {counts['new']}")
display(score(guess_same_reply, stale_reply == fresh_reply, kind="choice"))

# %%
# NBVAL_CHECK_OUTPUT
print("reused (stale) cache:", repr(stale_reply))
print("fresh cache:         ", repr(fresh_reply))
print("same reply:", stale_reply == fresh_reply)

# %%
plot_id_alignment(cached_ids, prompts[1], title="Turn 2: the ids the cache holds vs the new prompt's ids")

# %% [markdown]
# Every red position is stale: the model attends to keys and values computed for the
# think block and for turn-1 text at shifted positions, and nothing tells you. `kvlab.measure.chat.ChatSession` keeps
# the
# ids it fed into the cache and compares them before generating. By default it refuses, naming the position and
# both tokens:

# %% tags=["raises-exception"]
# NBVAL_CHECK_OUTPUT
strict = ChatSession(model, tokenizer, chat_template=THINK_DROPPING_TEMPLATE, max_new_tokens=NEW_TOKENS)
strict.ask(user_prompts[0])
strict.ask(user_prompts[1])

# %% [markdown]
# **Predict first.** `on_mismatch="crop"` crops the cache back to the last matching position
# (`past_key_values.crop(-n)`, notebook 07) and lets `generate` prefill the rest. How many tokens will turn 2
# prefill now, and will its reply match the fresh cache's (True or False)?

# %%
guess_prefilled = None  # tokens turn 2 prefills after the crop: your guess
guess_matches = None  # True if the repaired turn 2 gives the fresh cache's reply: your guess

# %%
# NBVAL_CHECK_OUTPUT
repaired = ChatSession(model, tokenizer, chat_template=THINK_DROPPING_TEMPLATE, on_mismatch="crop",
                       max_new_tokens=NEW_TOKENS)
repaired.ask(user_prompts[0])
turn = repaired.ask(user_prompts[1])
display(score(guess_prefilled, turn.prefilled_tokens, unit=" tokens", kind="count", label="prefilled:"))
display(score(guess_matches, turn.reply == fresh_reply, kind="choice", label="same reply:"))

# %%
# NBVAL_CHECK_OUTPUT
print(f"kept {turn.reused_tokens} cached tokens, cropped {turn.mismatch.cached_tokens - turn.mismatch.position}, "
      f"prefilled {turn.prefilled_tokens} of {turn.prompt_tokens}")
print("same reply as the fresh cache:", turn.reply == fresh_reply)
print("crops logged in the trace:", [c["n"] for c in repaired.cache.trace.crops])

# %% [markdown]
# ## Takeaway
#
# - Reusing one cache across turns is one argument: build a `DynamicCache` once and pass it as
#   `past_key_values=` to every turn's `generate`, with the whole conversation's ids. Each turn then prefills
#   only what is new; the replies are the ones a fresh cache gives.
# - The reuse is only correct if the cached ids are a prefix of the new prompt's ids. A template that drops or
#   rewrites tokens of earlier turns (think blocks, whitespace, a reply that re-tokenizes differently) breaks
#   that **silently** in plain transformers.
# - Compare the ids the cache was fed with the new prompt before generating (`kvlab.measure.chat.first_mismatch`), or
# let
#   `ChatSession` do it: raise, warn, or crop back to the common prefix.
#
# **Next:** [07 · Crop and rollback](07_crop_and_rollback.ipynb): what `crop` does to each kind of layer, and a
# speculative-decoding loop that rolls rejected tokens back out of the cache.
