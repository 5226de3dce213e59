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
# **Learning goal.** After this notebook you can run the transformers guide's prefix-cache recipe (prefill a
# `StaticCache` under `torch.no_grad()`, then `copy.deepcopy` it for every question), say what each copy costs
# in memory for a `StaticCache` and a `DynamicCache`, measure what the reuse saves in time to the first token
# (and what the deep copy costs of it), and check, id by id, the condition the reuse needs to stay right: the
# prefix's token ids must be the first ids of the whole prompt (the guide's own prefix is put to that test).
#
# **In kvlab's words.** Many prompts start the same way. The keys and values of that common start do not
# depend on what follows, so they can be computed once. Generating into a cache changes it, so each question
# gets its own deep copy of the prefilled cache; `generate` then only has to run the part of the prompt the
# copy does not hold yet. That is right only if the prefix's token ids are exactly the first ids of the full
# prompt, and joining two strings does not promise that.
#
# SmolLM2-135M-Instruct, greedy decoding, CPU.

# %%
# %matplotlib inline
import copy
import os
import warnings

import ipywidgets as widgets
import torch
import transformers
from transformers import DynamicCache, StaticCache

import kvlab
from kvlab.i18n import number
from kvlab.live import live
from kvlab.measure import timing
from kvlab.plots.prefill_bars import plot_prefill_bars
from kvlab.plots.prefix import plot_prefix_copies, plot_token_prefix
from kvlab.measure.prefix import cache_bytes, check_token_prefix, time_first_token, token_prefix
from kvlab.models import load_config_and_tokenizer
from kvlab.predictions import score

warnings.filterwarnings("ignore", message=".*past_key_values.*deprecated")  # transformers 5.24 spells it `cache=`
transformers.logging.set_verbosity_error()  # the same notice, logged once by transformers
torch.manual_seed(0)
model, tokenizer = kvlab.load("smollm2")
SHOP = (
    "You answer questions for Wheelwright, a small bicycle repair shop, in one short sentence.\n"
    "Opening hours: Monday to Friday 9:00 to 18:00, Saturday 10:00 to 14:00, closed on Sundays and holidays.\n"
    "Prices: replacing an inner tube costs 12 euros and takes 20 minutes. Truing a wheel costs 18 euros. "
    "Brake pads cost 15 euros per pair, fitting included. A full service costs 65 euros and takes one day.\n"
    "We sell city bikes and cargo bikes, but no electric bikes. We rent cargo bikes for 30 euros a day.\n"
    "Payment by card or cash. Repairs are guaranteed for three months.\n"
)  # ends in a newline: a token boundary (section 4 shows why that matters)
QUESTIONS = [
    "Question: How much does it cost to replace an inner tube?\nAnswer:",
    "Question: Do you sell electric bikes?\nAnswer:",
    "Question: Are you open on Sunday?\nAnswer:",
]
NEW_TOKENS = 8
MAX_CACHE_LEN = 224  # room for the prefix, the longest question and its answer
QUICK = os.environ.get("KVLAB_QUICK") == "1"  # shrinks the timed runs for CI; checked outputs hold either way
REPEATS = 3 if QUICK else 7  # timed runs are repeated and interleaved; times are medians with their spread

# %% [markdown]
# ## 1. Prefill once, copy per question (Preencher um cache (cache de prefixo))
#
# The guide's recipe, on the shop text: build a `StaticCache` big enough for prefix + question + answer, run
# one forward over the prefix without gradients (so the cache's tensors can be deep-copied), then for every
# question tokenize the *whole* prompt (prefix + question), deep-copy the prefilled cache and pass the copy to
# `generate` as `past_key_values=`.

# %%
prompt_cache = StaticCache(config=model.config, max_cache_len=MAX_CACHE_LEN)
inputs = tokenizer(SHOP, return_tensors="pt")
with torch.no_grad():
    output = model(**inputs, past_key_values=prompt_cache)
prompt_cache = output.cache  # the guide reads `.past_key_values`; see the next cell

answers = []
for question in QUESTIONS:
    new_inputs = tokenizer(SHOP + question, return_tensors="pt")
    past_key_values = copy.deepcopy(prompt_cache)
    out = model.generate(**new_inputs, past_key_values=past_key_values, max_new_tokens=NEW_TOKENS, do_sample=False)
    answers.append(out[0, new_inputs.input_ids.shape[-1]:])  # the new tokens only

# %% [markdown]
# In transformers 5.24 the forward's output names its cache field `cache`. The guide's `.past_key_values` still
# works: it is a deprecated property that returns the same object (and logs a one-time notice, silenced above).

# %%
# NBVAL_CHECK_OUTPUT
print(type(output).__name__, "fields:", list(output.keys()))
print("output.past_key_values is output.cache:", output.past_key_values is output.cache)
print(f"prefix: {inputs.input_ids.shape[-1]} tokens; the prefilled cache reports {prompt_cache.get_seq_length()}")
for question, new in zip(QUESTIONS, answers):
    print(f"{question.splitlines()[0]!r} -> {tokenizer.decode(new, skip_special_tokens=True)!r}")

# %% [markdown]
# Why the prefill runs under `torch.no_grad()`: `generate` turns gradients off by itself, a plain `model(...)` call
# does not. The model's weights require gradients (they are trainable parameters), so with gradients on,
# autograd records how every key and value was computed: the cache's tensors become nodes of a graph instead of
# plain data, and `copy.deepcopy` refuses them. The same prefill without `torch.no_grad()`:

# %%
# NBVAL_CHECK_OUTPUT
print("gradients enabled:", torch.is_grad_enabled(), "| weights require grad:", model.lm_head.weight.requires_grad)
grad_cache = StaticCache(config=model.config, max_cache_len=MAX_CACHE_LEN)
grad_cache = model(**inputs, past_key_values=grad_cache).cache  # no torch.no_grad(): autograd records the prefill
keys = grad_cache.layers[0].keys
print("keys.requires_grad:", keys.requires_grad, "| a leaf of the graph:", keys.is_leaf,
      "| made by:", type(keys.grad_fn).__name__)
try:
    copy.deepcopy(grad_cache)
    print("copy.deepcopy worked")
except RuntimeError as error:
    print("copy.deepcopy raised RuntimeError; its message names graph leaves:", "(graph leaves)" in str(error))
with torch.no_grad():
    print("under torch.no_grad(), keys.requires_grad:",
          model(**inputs, past_key_values=StaticCache(config=model.config, max_cache_len=MAX_CACHE_LEN))
          .cache.layers[0].keys.requires_grad)  # fmt: skip
del grad_cache, keys  # the recorded graph holds every layer's activations

# %% [markdown]
# Every key and value of the cache is the output of an operation autograd recorded (`IndexCopyBackward0`: the
# StaticCache writes its slots with `index_copy_`, in `StaticLayer.update` of `transformers/cache_utils.py`,
# transformers 5.25), and PyTorch deep-copies only tensors a user created, the leaves of the graph
# (`Tensor.__deepcopy__` in `torch/_tensor.py`, torch 2.13). Its message says so: "Only Tensors created
# explicitly by the user (graph leaves) support the deepcopy protocol at the moment". Under `torch.no_grad()`
# nothing is recorded: the last line above prints `requires_grad` False for the same prefill's keys, so the
# cache holds plain tensors and the deep copy works.

# %% [markdown]
# **Predict first.** SmolLM2 keeps, per token, 30 layers × (keys + values) × 3 heads × 64 dims × 4 bytes =
# 46,080 B (printed with the scores below). The `StaticCache` above was made with `max_cache_len=224` and
# prefilled with the 160-token prefix. How many bytes does each deep copy of it hold? And a deep copy of a
# `DynamicCache` prefilled with the same prefix, at the moment it is made?

# %%
guess_static_copy = None  # bytes a deep copy of the prefilled StaticCache holds: your guess
guess_dynamic_copy = None  # bytes a deep copy of the prefilled DynamicCache holds when made: your guess

# %% [markdown]
# ## 2. The same recipe, watched
#
# The same code again, inside `kvlab.watch`, once with the guide's `StaticCache` and once with a
# `DynamicCache` (the guide's comment says either works). `watch.traces` lists every cache the model used: each
# prefilled prefix cache, then one trace per deep copy, whose `meta["copied_from"]` names the trace it was copied
# from. For reference, each question is also answered without reuse: plain `generate` on the whole prompt.

# %%
reused = {}
with kvlab.watch(model) as watch:
    for name, prompt_cache in {"StaticCache": StaticCache(config=model.config, max_cache_len=MAX_CACHE_LEN),
                               "DynamicCache": DynamicCache(config=model.config)}.items():
        inputs = tokenizer(SHOP, return_tensors="pt")
        with torch.no_grad():
            prompt_cache = model(**inputs, past_key_values=prompt_cache).cache
        for question in QUESTIONS:
            new_inputs = tokenizer(SHOP + question, return_tensors="pt")
            past_key_values = copy.deepcopy(prompt_cache)
            out = model.generate(**new_inputs, past_key_values=past_key_values, max_new_tokens=NEW_TOKENS,
                                 do_sample=False)  # fmt: skip
            reused.setdefault(name, []).append(out[0, new_inputs.input_ids.shape[-1]:])

no_reuse, prompt_tokens = [], []
for question in QUESTIONS:
    new_inputs = tokenizer(SHOP + question, return_tensors="pt")
    out = model.generate(**new_inputs, max_new_tokens=NEW_TOKENS, do_sample=False)
    no_reuse.append(out[0, new_inputs.input_ids.shape[-1]:])
    prompt_tokens.append(new_inputs.input_ids.shape[-1])

# %%
# NBVAL_CHECK_OUTPUT
def print_trace(i, trace, label):
    summary = trace.summary()
    print(f"trace {i}: {trace.meta['cache_class']:<12} {label:<18} holds {number(summary['final_bytes']):>10} B at "
          f"the end, {summary['slots_live'] // 30} of {summary['slots_allocated'] // 30} slots per layer live")


for i, trace in enumerate(watch.traces):
    if trace.meta.get("copied_from") is None:
        print_trace(i, trace, label="prefilled prefix")
    else:
        print_trace(i, trace, label=f"copy of trace {trace.meta['copied_from']}")
print("prompt tokens per question, no reuse:", prompt_tokens)
for name, outs in reused.items():
    print(f"{name}: same tokens as no reuse: {[torch.equal(a, b) for a, b in zip(outs, no_reuse)]}; "
          f"same as section 1 (unwatched): {[torch.equal(a, b) for a, b in zip(outs, answers)]}")

# %%
# NBVAL_CHECK_OUTPUT
static_copy = watch.traces[1]
dynamic_copy_bytes = cache_bytes(copy.deepcopy(prompt_cache))  # prompt_cache: the loop's prefilled DynamicCache
print(f"per token, all 30 layers: {number(static_copy.summary()['peak_bytes'] // MAX_CACHE_LEN)} B")
display(score(guess_static_copy, static_copy.summary()["peak_bytes"], unit=" B", kind="amount"))
display(score(guess_dynamic_copy, dynamic_copy_bytes, unit=" B", kind="amount"))

# %%
plot_prefix_copies(watch.traces, prompt_tokens,
                   title=f"{len(QUESTIONS)} questions after a {watch.traces[0].summary()['slots_live'] // 30}-token prefix, "
                         f"{NEW_TOKENS} new tokens each")  # fmt: skip

# %% [markdown]
# Reading the traces:
#
# - Every copy's first forward wrote only the question's tokens (left panel): the prefix's keys and values came
#   with the copy. Without reuse, each answer runs the whole prompt through the model again.
# - A `StaticCache` copy holds all `max_cache_len` slots from the moment it is copied, filled or not, so every
#   copy costs the same 224 slots. A `DynamicCache` copy holds the prefix's tokens and grows only while its
#   answer is generated. Per question, the memory price of reuse is one copy alive while that answer runs.
# - The tokens are the same with and without reuse, and the same watched or not: the prefix's keys and values do
#   not depend on what comes after it, and `kvlab.watch` only records.

# %% [markdown]
# ## 3. What the reuse saves before the first token
#
# Section 2 counted the work: without reuse, the first forward of every answer runs the whole prompt, prefix and
# question; with a copy, it runs only the question's tokens. The first new token comes out of that first forward,
# so the counts predict that a copy reaches it sooner. They also name what the reuse costs: every request
# deep-copies the prefilled cache, all of its bytes, before `generate` starts. That is a memory copy with no model
# math in it, so we expect it to be a small share of the time with the prefix; the run below measures the share. The
# prediction is not
# "faster by the ratio of the tokens": both calls also pay what does not grow with the prompt (preparing the
# inputs, the final logits, choosing a token).
#
# To time it, each question runs both ways with `max_new_tokens=1`, so a call ends at its first new token: the
# guide's step (the `copy.deepcopy` inside the timed call, since a server pays it on every request) and plain
# `generate` on the whole prompt. The deep copy alone is timed too. `time_first_token` runs every call once
# inside `kvlab.watch` to count its prefill, then times them all, repeated and interleaved. Each time is printed
# as the median of the repeats with their interquartile range (IQR: the middle half of the repeats).

# %%
# Not checked: times depend on the machine.
prompt_cache = StaticCache(config=model.config, max_cache_len=MAX_CACHE_LEN)
with torch.no_grad():
    prompt_cache = model(**tokenizer(SHOP, return_tensors="pt"), past_key_values=prompt_cache).cache
question_inputs = [tokenizer(SHOP + asked, return_tensors="pt") for asked in QUESTIONS]


def with_prefix(new_inputs):  # the guide's per-question step, stopped at the first new token
    past_key_values = copy.deepcopy(prompt_cache)
    return model.generate(**new_inputs, past_key_values=past_key_values, max_new_tokens=1, do_sample=False)


def without_prefix(new_inputs):  # no reuse: generate prefills the whole prompt into a fresh cache
    return model.generate(**new_inputs, max_new_tokens=1, do_sample=False)


def deep_copy_only():
    return copy.deepcopy(prompt_cache)


first_token = time_first_token(model, with_prefix, without_prefix, deep_copy_only, question_inputs, repeats=REPEATS,
                               labels=("deepcopy + generate", "generate, whole prompt", "deepcopy alone"))

# %%
# NBVAL_CHECK_OUTPUT
print("tokens prefilled per question, deepcopy + generate:   ", first_token.prefilled_with_prefix)
print("tokens prefilled per question, generate, whole prompt:", first_token.prefilled_without_prefix)
print(f"bytes each deep copy duplicates: {number(first_token.copy_bytes)} B "
      f"(the prefilled StaticCache holds {number(cache_bytes(prompt_cache))} B)")

# %%
# Not checked: times depend on the machine. Medians of REPEATS interleaved runs with their IQR; each ratio with its
# 95% interval.
print(f"{first_token.deep_copy.label}: {first_token.deep_copy.describe()}")
verdicts = []
for asked, reused, whole in zip(QUESTIONS, first_token.with_prefix, first_token.without_prefix):
    share = timing.compare(reused, first_token.deep_copy, warn=False)  # deepcopy alone / deepcopy + generate
    verdicts.append(timing.compare(whole, reused, warn=False).verdict())
    print(asked.splitlines()[0])
    print(f"    {reused.label}: {reused.describe()} | {whole.label}: {whole.describe()}")
    print("   ", verdicts[-1])
    print(f"    the deepcopy's share of {reused.label}: {number(100 * share.ratio)}% "
          f"({number(100 * share.low)}%-{number(100 * share.high)}%)")

# %%
# Not checked: times depend on the machine. No reuse first, so it keeps section 2's colour; the box under the
# panels carries the verdicts printed above.
series = first_token.series()
plot_prefill_bars({name: series[name] for name in reversed(series)}, "question", "time to first token (ms)",
                  f"{len(QUESTIONS)} questions after the shop text, one new token each "
                  f"(times: median and IQR of {REPEATS})", verdicts=verdicts)  # fmt: skip

# %% [markdown]
# The token counts are exact: with the copy, each question's first forward runs only the question's tokens;
# without it, the whole prompt. Whether the time to the first token shows that saving on this machine is the
# verdict printed for each question (and in the box under the figure), with its interval; an interval that
# contains 1 means no detectable difference, and "too noisy to tell" means the repeats disagreed too much to say.
# The deep copy's share is printed beside it, with its interval. What the reuse skips is the prefix's part of
# each prompt: the counts above show the prefix's 160 tokens spared out of each prompt's 171 to 176.
#
# What the copy duplicates is the whole `StaticCache`, 10,321,920 B: all 224 slots of `max_cache_len`, filled or
# not. So its bytes follow `max_cache_len`, not the length of the prefix. Does its time follow them too? The same
# 160-token prefix, prefilled into StaticCaches of 224, 896 and 3,584 slots, each deep-copied, interleaved:

# %%
sized = {}
for max_cache_len in (MAX_CACHE_LEN, 4 * MAX_CACHE_LEN, 16 * MAX_CACHE_LEN):
    cache = StaticCache(config=model.config, max_cache_len=max_cache_len)
    with torch.no_grad():
        sized[max_cache_len] = model(**tokenizer(SHOP, return_tensors="pt"), past_key_values=cache).cache
copy_times = timing.time_interleaved({f"max_cache_len {number(n)}": lambda cache=cache: copy.deepcopy(cache)
                                      for n, cache in sized.items()}, repeats=REPEATS)  # fmt: skip

# %%
# NBVAL_CHECK_OUTPUT
for max_cache_len, cache in sized.items():
    print(f"max_cache_len {number(max_cache_len)}: {cache.get_seq_length()} tokens held, a deep copy duplicates "
          f"{number(cache_bytes(cache)):>10} B")

# %%
# Not checked: times depend on the machine.
smallest = copy_times[f"max_cache_len {number(MAX_CACHE_LEN)}"]
for label, each in copy_times.items():
    print(f"{label}: {each.describe()}")
for label, each in list(copy_times.items())[1:]:
    print(timing.compare(smallest, each, warn=False).verdict())

# %% [markdown]
# The bytes grow fourfold with each step of `max_cache_len`, for the same 160 tokens. The time grows with them,
# but not necessarily in proportion: set each verdict's factor, with its interval, beside 4 and 16, the factors
# of the bytes, to see how this run's times follow them. Three sizes are too few to split a copy's time into a
# fixed part and a part per byte, so this notebook does not; what the verdicts show is the direction, the more
# slots, the longer the copy. Size `max_cache_len` for the longest question and answer, not more: every request
# pays for every slot.

# %% [markdown]
# ## 4. The guide's own prefix, token by token
#
# The guide's sample (section "Prefill a cache (prefix caching)", on Llama-2) caches
# `"You are a helpful assistant. "`, with a space at the end, and then tokenizes `INITIAL_PROMPT + prompt` for
# every question.
#
# SmolLM2's tokenizer is a byte-level BPE, GPT-2's scheme, which writes a space as `Ġ` (the model's
# `tokenizer.json`: model `BPE`, pre-tokenizer `ByteLevel`). The guide's Llama-2 and Gemma 3, whose tokenizer
# the cell below checks too, write a space as `▁` (`LlamaTokenizer` in
# `transformers/models/llama/tokenization_llama.py` and `GemmaTokenizer` in
# `transformers/models/gemma/tokenization_gemma.py`, transformers 5.25).
#
# **Predict first.** Tokenized together with `"What is the capital of France?"`, are the ids of the guide's prefix
# still the first ids of the full prompt (True or False)?

# %%
guess_ids_line_up = None  # True if the prefix's ids are the first ids of prefix + question: your guess

# %%
# NBVAL_CHECK_OUTPUT
INITIAL_PROMPT = "You are a helpful assistant. "
question = "What is the capital of France?"
check = token_prefix(tokenizer, INITIAL_PROMPT, question)
print("prefix alone:       ", check.prefix_tokens)
print("prefix + question:  ", check.full_tokens[:len(check.prefix_tokens) + 2], "...")
print("ids of the prefix are a prefix of the full ids:", check.ok, "| first difference at position", check.mismatch)
print(f"ids at position {check.mismatch}: prefix alone {check.prefix_ids[check.mismatch]}, "
      f"prefix + question {check.full_ids[check.mismatch]}")
_config, gemma_tokenizer = load_config_and_tokenizer("gemma3")  # a SentencePiece-style tokenizer, no weights
gemma_check = token_prefix(gemma_tokenizer, INITIAL_PROMPT, question)
print("Gemma 3, prefix alone ends:", gemma_check.prefix_tokens[-3:], "| prefix + question:",
      gemma_check.full_tokens[len(gemma_check.prefix_tokens) - 2:len(gemma_check.prefix_tokens) + 1])
print("Gemma 3: ids of the prefix are a prefix of the full ids:", gemma_check.ok)

# %%
# NBVAL_CHECK_OUTPUT
display(score(guess_ids_line_up, check.ok, kind="choice"))

# %% [markdown]
# Alone, the prefix ends in a lone space token `Ġ` (its id is printed above). Joined to the question, the same
# space is spelled inside `ĠWhat`; Gemma 3's tokenizer does the same with `▁` and `▁What`. The cache holds 7 positions,
# so `generate` treats the first 7 ids of the full prompt
# as already cached and feeds the model from position 7 on: `ĠWhat` is never run, and position 6 holds the keys
# and values of a bare space instead. What does that do to the answer? The guide's recipe, with its prefix:

# %%
prompt_cache = StaticCache(config=model.config, max_cache_len=64)
inputs_initial_prompt = tokenizer(INITIAL_PROMPT, return_tensors="pt")
with torch.no_grad():
    prompt_cache = model(**inputs_initial_prompt, past_key_values=prompt_cache).cache

new_inputs = tokenizer(INITIAL_PROMPT + question, return_tensors="pt")
past_key_values = copy.deepcopy(prompt_cache)
reused_out = model.generate(**new_inputs, past_key_values=past_key_values, max_new_tokens=NEW_TOKENS, do_sample=False)
fresh_out = model.generate(**new_inputs, max_new_tokens=NEW_TOKENS, do_sample=False)  # no reuse: the right answer

# %%
# NBVAL_CHECK_OUTPUT
start = new_inputs.input_ids.shape[-1]
print("reused prefix cache:", repr(tokenizer.decode(reused_out[0, start:], skip_special_tokens=True)))
print("no reuse:           ", repr(tokenizer.decode(fresh_out[0, start:], skip_special_tokens=True)))
print("same tokens:", torch.equal(reused_out[0, start:], fresh_out[0, start:]))

# %% [markdown]
# No error, no warning, and a different answer: the reused cache answered a prompt that reads "You are a helpful
# assistant.␣ is the capital of France?" (the model never saw `ĠWhat`). In this small model neither answer says
# "Paris" (the prompt has no chat template, and the model is small), but only the answer without reuse
# is the model's answer to the prompt you wrote. The fix is to end the prefix on a token boundary: drop the
# trailing space and start the question with it (`"You are a helpful assistant."` + `" What is…"`), or end the
# prefix with a newline, or cache a whole chat-template turn.
#
# kvlab's `check_token_prefix` compares the ids before you reuse a cache and says where they part:

# %% tags=["raises-exception"]
# NBVAL_CHECK_OUTPUT
check_token_prefix(check.prefix_ids, check.full_ids, tokenizer)

# %% [markdown]
# ### Try it: which prefixes are safe?
#
# Pick a prefix and type a question: the figure tokenizes prefix and prefix + question with SmolLM2's tokenizer
# and lines the ids up around the seam. Purple positions agree (the cache can be reused there), red ones differ
# (the cache would hold the wrong keys and values there), light grey ones are the question's own tokens, which
# the copy's first forward runs.

# %%
PREFIXES = {
    "'You are a helpful assistant. ' (the guide's)": "You are a helpful assistant. ",
    "'You are a helpful assistant.\\n'": "You are a helpful assistant.\n",
    "a system turn of the chat template": "<|im_start|>system\nYou are a helpful assistant.<|im_end|>\n",
    "the shop text + 'Question: '": SHOP + "Question: ",
}


def prefix_check(prefix, question):
    return plot_token_prefix(token_prefix(tokenizer, prefix, question))


live(prefix_check,
     prefix=widgets.Dropdown(options=list(PREFIXES.items()), value=INITIAL_PROMPT, description="prefix"),
     question=widgets.Text(value=question, continuous_update=False, description="question"))

# %%
# NBVAL_CHECK_OUTPUT
for label, prefix in PREFIXES.items():
    each = token_prefix(tokenizer, prefix, question)
    if each.mismatch is None:  # token_prefix's mismatch is None when every id of the prefix lines up
        print(f"{label:<48} ids line up: {each.ok!s:<5} | no difference")
    else:
        print(f"{label:<48} ids line up: {each.ok!s:<5} | first difference at position {each.mismatch}")

# %% [markdown]
# The default is the guide's prefix: the red box at its last position is the lone space. For this question the
# prefix that ends in a newline and the chat-template turn line up (every box of the prefix purple), and the shop
# text ending in `"Question: "` fails the same way as the guide's prefix, as the table above prints. Type other
# questions to test them; the table is for the question typed in the code.

# %% [markdown]
# ## Takeaway
#
# - The guide's recipe works on a prefix that ends on a token boundary (the shop text ends in a newline):
#   prefill a cache once under `torch.no_grad()` (with gradients on, the cache's tensors belong to autograd's graph
#   and `copy.deepcopy` refuses them), `copy.deepcopy` it per question, pass the copy with the whole prompt. Each
#   answer runs only its question's tokens, and the tokens equal those without reuse. With the guide's own
#   prefix, which ends in a space, the same recipe silently changes the answer (section 4). In transformers 5.24
#   the forward's output field is `.cache` (`.past_key_values` is a deprecated alias for it).
# - A `StaticCache` copy costs every slot of `max_cache_len` (bytes, and the time of copying them: section 3
#   measures three sizes); a `DynamicCache` copy costs the prefix's tokens and grows with its answer.
# - What the reuse saves is prefill: the tokens each request runs before its first new token (exact counts in
#   section 3). Whether that shortens the time to the first token on your machine is the verdict section 3
#   prints; each request also pays one `copy.deepcopy` of the whole prefix cache, whose share is printed there.
# - End the prefix on a token boundary, never on a space: the guide's own `"You are a helpful assistant. "`
#   makes SmolLM2 skip the question's first word without a word of warning. Check the ids
#   (`kvlab.measure.prefix.check_token_prefix`) before reusing a cache.
#
# **Next:** [09 · Where tensors live](09_where_tensors_live.ipynb): what `generate` keeps on which device, and
# what each forward call receives.
