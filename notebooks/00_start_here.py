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
# # 00 · Start here: what a KV cache stores, and why it exists
#
# **Learning goal.** After this notebook you can turn the cache off and on in `generate` the way the cache guide
# does, pass a `DynamicCache` you built yourself, record what it holds with `kvlab.watch`, compute its size from
# a model's config, and explain why generating without one gets slower with every token.
#
# **In kvlab's words.** A decoder predicts token *t* by letting it attend to tokens *1…t−1*. Each attention
# layer turns every token into a *key* (what it offers to be found by) and a *value* (what it hands over once
# found). Those never change once computed, so a cache keeps them: per layer, keys and values of shape
# `(batch, kv_heads, tokens, head_dim)`. With the cache, a step runs **one** new token through the model and
# reads the stored keys and values; without it, every step re-runs the model over the **whole** sequence.
#
# Everything below runs SmolLM2-135M-Instruct (30 layers, 3 KV heads × 64) on the CPU, float32, greedy decoding.
#
# ### The guide, section by section
#
# These notebooks follow transformers' "Cache strategies" guide; its pt-BR section titles stand beside the
# English headings, so you can read the two side by side.
#
# | guide section (pt-BR) | what it teaches | notebook |
# |---|---|---|
# | Estratégias de cache (the table) | which cache to pick | [10 · choose your cache](10_choose_your_cache.ipynb) |
# | Cache padrão | `DynamicCache`, `use_cache=False`, a cache passed to `generate` | **00** (here), [01 · DynamicCache](01_dynamic_cache.ipynb) (sliding and chunked layers) |
# | Cache de tamanho fixo | `cache_implementation="static"`, `StaticCache`, compilation | [02 · StaticCache](02_static_cache.ipynb) |
# | Mantenha os tensores de geração na CPU | where `generate`'s tensors live | [09 · where tensors live](09_where_tensors_live.ipynb) |
# | Cache offloading | `"offloaded"`, `"offloaded_static"`, `offloading=True`, `resilient_generate` | [03 · offloading](03_offloading.ipynb) |
# | Cache quantizado | `cache_implementation="quantized"` with a `cache_config` | [04 · quantized caches](04_quantized_caches.ipynb) |
# | Cache de encoder-decoder; Caches específicos de modelo | `EncoderDecoderCache`, Mamba and hybrid state | [05 · encoder-decoder and model-specific](05_encoder_decoder_and_model_specific.ipynb) |
# | Geração iterativa | one cache across chat turns | [06 · iterative chat](06_iterative_chat.ipynb) |
# | Recortar um cache | `crop(-n)`, `activate_past_recording()` | [07 · crop and rollback](07_crop_and_rollback.ipynb) |
# | Preencher um cache (cache de prefixo) | prefill a prefix once, `copy.deepcopy` per question | [08 · prefix caching](08_prefix_caching.ipynb) |
#
# [11 · Cache Explorer](11_cache_explorer.ipynb) puts every kind behind one set of controls.
#
# ### Words: the guide's terms
#
# The notebooks use the English words; the pt-BR guide and the Portuguese notebooks (`notebooks/pt-BR/`) use these,
# one word per concept (`kvlab/i18n/terms_pt_BR.toml` holds them, and a test checks every translation against it).
#
# | English (these notebooks) | pt-BR (the guide) |
# |---|---|
# | KV cache; the default (dynamic) cache | cache KV; cache padrão, cache dinâmico |
# | fixed-size (static) cache | cache de tamanho fixo, cache estático |
# | key, value, layer, token | chave, valor, camada, token |
# | sliding window; chunked attention; linear attention | janela deslizante; atenção em blocos; atenção linear |
# | full attention; self-attention, cross-attention | atenção completa; autoatenção, atenção cruzada |
# | encoder, decoder; encoder-decoder cache | encoder, decoder; cache de encoder-decoder |
# | slot; allocated; live (slots, tokens); masked (allocated but unused) | posição; alocada; ocupada; mascarada (alocada, não usada) |
# | waste; evicted (dropped by a sliding window); storage (a tensor's memory) | desperdício; descartado; armazenamento |
# | step, decode step; forward (pass); prefill | passo, passo de decodificação; forward; pré-preenchimento |
# | greedy (decoding); full precision | greedy; precisão total |
# | offloading (moving layers to the CPU); prefetch | descarregamento (offloading); pré-carregamento |
# | quantization, quantized cache; packed; residual; flush | quantização, cache quantizado; empacotado; parte residual; flush |
# | crop, roll back; past recording | recortar (crop), reverter; registro do passado |
# | draft (speculative decoding) | rascunho |
# | prefix cache; deep copy; reuse | cache de prefixo; cópia profunda; reutilização |
# | iterative generation (chat); chat template | geração iterativa; chat template |
# | request; paged cache; block; continuous batching | requisição; cache paginado; bloco; batching contínuo |
# | the Cache Explorer | Explorador de Cache |
# | IQR = interquartile range (the middle half of repeated timings) | IQR = intervalo interquartil (a metade central das medições repetidas) |

# %%
# %matplotlib inline
import os
import sys
import warnings

import ipywidgets as widgets
import torch
import transformers
from transformers import DynamicCache

import kvlab
from kvlab.i18n import marks, number
from kvlab.live import live
from kvlab.measure import formula, latency, text, timing
from kvlab.plots import growth
from kvlab.plots import latency as latency_plots
from kvlab.plots.generate_time import plot_generate_time
from kvlab.predictions import score

warnings.filterwarnings("ignore", message=".*past_key_values.*deprecated")  # transformers 5.24 spells it `cache=`
QUICK = os.environ.get("KVLAB_QUICK") == "1"  # shrinks the timed runs for CI; checked outputs hold either way
NEW_TOKENS = 16 if QUICK else 64
REPEATS = 1 if QUICK else 3  # timed runs are repeated and interleaved; times are medians with their spread
torch.manual_seed(0)
transformers.logging.disable_progress_bar()
model, tokenizer = kvlab.load("smollm2")  # SmolLM2-135M-Instruct, 30 layers, float32, CPU
print(f"Python {sys.version.split()[0]}, transformers {transformers.__version__}, torch {torch.__version__}")

# %% [markdown]
# ## 1. The default cache (Cache padrão)
#
# `generate` uses a `DynamicCache` unless told otherwise: it starts empty and grows by one token per layer at
# every step. The guide shows two calls: one with the cache switched off (`use_cache=False`), and one with a
# `DynamicCache` you create and hand to `generate`.
#
# **Predict first.** Greedy decoding, same prompt, 20 new tokens: does switching the cache off change the text?
# Set `guess` to `True` (the text changes) or `False` (it does not), then run the next two cells.

# %%
guess = None  # does use_cache=False change the generated text? True or False: your guess

# %%
# NBVAL_CHECK_OUTPUT
inputs = tokenizer("The best thing about learning to cook is", return_tensors="pt")
no_cache = model.generate(**inputs, do_sample=False, max_new_tokens=20, use_cache=False)
default = model.generate(**inputs, do_sample=False, max_new_tokens=20)  # the default: a DynamicCache
texts_differ = not torch.equal(no_cache, default)
display(score(guess, texts_differ, kind="choice"))

# %%
# NBVAL_CHECK_OUTPUT
print(repr(tokenizer.decode(default[0], skip_special_tokens=True)))
print("same tokens with use_cache=False:", torch.equal(no_cache, default))

# %% [markdown]
# **A spelling note, said once for all notebooks.** The guide passes a cache as `generate(past_key_values=...)`.
# In transformers 5.25, the version used here, that argument is spelled `cache=`: `generate` carries
# `@deprecate_kwarg("past_key_values", "6.0.0", new_name="cache")` (`transformers/generation/utils.py`), which
# hands `past_key_values=` on as `cache=` with a deprecation warning (silenced in the imports cell) until its
# removal in 6.0.0. These notebooks keep the guide's spelling wherever it still works, so you can match each
# cell with the guide's code.

# %%
# NBVAL_CHECK_OUTPUT
past_key_values = DynamicCache(config=model.config)
out = model.generate(**inputs, do_sample=False, max_new_tokens=20, past_key_values=past_key_values)
print("same tokens as the default:", torch.equal(out, default))
print(f"{type(past_key_values).__name__}: {len(past_key_values.layers)} layers, "
      f"{past_key_values.get_seq_length()} tokens cached "
      f"({inputs.input_ids.shape[-1]} prompt + 20 new − 1: the last new token is never fed back)")
print("layer 0 keys:", tuple(past_key_values.layers[0].keys.shape), "  (batch, kv_heads, tokens, head_dim)")

# %% [markdown]
# The same three calls inside `kvlab.watch`: the code is unchanged, and every cache the model used is recorded.
# A run with `use_cache=False` records none.

# %%
# NBVAL_CHECK_OUTPUT
with kvlab.watch(model) as watch:
    past_key_values = DynamicCache(config=model.config)
    out = model.generate(**inputs, do_sample=False, max_new_tokens=20, past_key_values=past_key_values)
with kvlab.watch(model) as watch_default:
    model.generate(**inputs, do_sample=False, max_new_tokens=20)
with kvlab.watch(model) as watch_off:
    model.generate(**inputs, do_sample=False, max_new_tokens=4, use_cache=False)
summary = watch.trace.summary()
print("recorded the cache we passed:", watch.caches[0] is past_key_values, "| class:", watch.trace.meta["cache_class"])
print(f"steps {summary['steps']}, final {number(summary['final_bytes'])} bytes, "
      f"live slots {number(summary['slots_live'])} (30 layers × {summary['slots_live'] // 30} tokens)")
print("the default generate built:", watch_default.trace.meta["cache_class"],
      f"holding {number(watch_default.trace.summary()['final_bytes'])} bytes")
print("caches seen with use_cache=False:", len(watch_off.traces))

# %% [markdown]
# One step is the prefill (the 8-token prompt, all at once), then one per new token but the last: 20 steps.
# Each decode step adds one token to each of the 30 layers, so the 30 layers end with 8 + 19 = 27 tokens each:
# the 810 live slots printed above.
#
# ## 2. Does the cache change the tokens?
#
# In exact arithmetic, reading a key from the cache or recomputing it gives the same number. In float32 the
# order of operations differs (one query against stored keys, versus the whole sequence at once), so the logits
# can differ in their last bits, and a greedy decode could flip where two tokens are nearly tied. So we check
# rather than assume: four prompts (the sentence above and the first 16, 48 and 96 tokens of Python's reference
# manual, from `pydoc_data`), 12 new tokens each, `use_cache=False` against the default.

# %%
prompts = {"cook sentence": inputs.input_ids, **{f"manual, {n} tokens": text.prompt_ids(tokenizer, n)
                                                 for n in (16, 48, 96)}}  # fmt: skip
agreement = {}
for name, ids in prompts.items():
    runs = [model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=12,
                           min_new_tokens=12, use_cache=use_cache, return_dict_in_generate=True, output_logits=True)
            for use_cache in (False, True)]  # fmt: skip
    logit_gap = max((a - b).abs().max().item() for a, b in zip(runs[0].logits, runs[1].logits))
    top_two = min((lambda top: (top[0, 0] - top[0, 1]).item())(step.topk(2).values) for step in runs[1].logits)
    agreement[name] = (torch.equal(runs[0].sequences, runs[1].sequences), logit_gap, top_two)

# %%
# NBVAL_CHECK_OUTPUT
for name, (same, _, _) in agreement.items():
    print(f"{name:>17}: 12 new tokens identical with and without the cache: {same}")

# %%
# Not checked: the size of the float32 rounding differences depends on the CPU's kernels.
for name, (_, gap, top_two) in agreement.items():
    print(f"{name:>17}: largest logit difference over the 12 steps {marks(f'{gap:.1e}')}; "
          f"smallest gap between the top two logits {number(top_two, 3)}")

# %% [markdown]
# On these four prompts, in float32 with greedy decoding on this CPU, the cache did not change a single token;
# the logits differ only by float32 rounding (the second printout, in the hundred-thousandths), and the
# closest race between the top two tokens at any step (the last number of each line, in the hundredths) was
# hundreds of times wider than that, so no token was near flipping.
# That is evidence for these four prompts, not a guarantee for others: a prompt whose top two logits came
# closer than the rounding difference could flip a token.
#
# ## 3. Time per new token, with and without a cache
#
# Without a cache, the model re-reads the whole sequence for each new token. With one, it reads one token plus
# the stored keys and values. As the sequence grows, how should the time *per new token* change in each case?
#
# **Predict first.** The work can be counted before anything is timed. The prompt has 16 tokens. In the forward
# that produces the 5th new token, how many query-key pairs does one attention layer score without a cache
# (every token of the sequence so far against every one), and how many with the cache (the one new token against
# every stored key and itself)? Set both guesses, then run the cells down to the scores.

# %%
guess_no_cache = None  # query-key pairs per layer for the 5th new token, use_cache=False: your guess
guess_cache = None  # the same with the DynamicCache: your guess

# %% [markdown]
# `generate` reports only its total time, so to time each token on its own, `latency.token_times` runs the
# same greedy decoding as a plain loop of forwards: the whole sequence each step (no cache), or one token plus a
# `DynamicCache` (with cache). It repeats both loops, alternating, and keeps each token's median time and its
# interquartile range (IQR: the middle half of the repeated times); beside the time it counts the work of each
# forward exactly.

# %%
prompt = text.prompt_ids(tokenizer, 16)  # (1, 16): the first 16 tokens of the reference text
runs = latency.token_times(model, prompt, NEW_TOKENS, repeats=REPEATS,
                           modes={"no cache": False, "DynamicCache": True})  # no cache, cache, no cache, ...
without_cache, with_cache = runs["no cache"], runs["DynamicCache"]

# %%
# NBVAL_CHECK_OUTPUT
print("same tokens in the hand loop:", with_cache.token_ids == without_cache.token_ids)
print("no cache: each forward runs the whole sequence so far:", without_cache.tokens_run == without_cache.positions)
print("with the cache: tokens per forward after the prefill:", sorted(set(with_cache.tokens_run[1:])))
display(score(guess_no_cache, without_cache.pairs_scored[4], kind="count", label="query-key pairs, no cache:"))
display(score(guess_cache, with_cache.pairs_scored[4], kind="count", label="query-key pairs, cache:"))

# %%
# Timings (not checked: they depend on the machine). Each token's time over the repeats; ratios of medians with
# their 95% interval. One token has only 3 readings, so ten neighbouring tokens are pooled: 30 readings each.
early, late = range(1, 11), range(NEW_TOKENS - 10, NEW_TOKENS)  # tokens 2-11 and the last ten
verdicts = {}  # {what was compared: the verdict}, printed here and drawn under the figure
for name, run in runs.items():
    first_ten = run.timing_over(early, label=f"tokens {early.start + 1}-{early.stop}")
    last_ten = run.timing_over(late, label=f"tokens {late.start + 1}-{late.stop}")
    print(f"{name:>12}: positions {run.positions[early.start]}-{run.positions[early.stop - 1]} "
          f"{first_ten.describe()}; positions {run.positions[late.start]}-{run.positions[late.stop - 1]} "
          f"{last_ten.describe()}")
    verdicts[name] = timing.compare(first_ten, last_ten, warn=False).verdict()
totals = {name: timing.Timing(name, [sum(r) for r in run.runs]) for name, run in runs.items()}
verdicts["whole loop"] = timing.compare(totals["DynamicCache"], totals["no cache"], warn=False).verdict()
for compared, verdict in verdicts.items():
    print(f"{compared}: {verdict}")

# %%
latency_plots.plot_token_times({"no cache (use_cache=False)": without_cache, "DynamicCache": with_cache},
                               title=f"SmolLM2, {NEW_TOKENS} new tokens after a 16-token prompt", verdicts=verdicts)

# %% [markdown]
# The work is exact (the checked lines): without a cache, the forward for the token at position t runs all t
# tokens through the 30 layers and scores t × t query-key pairs per layer, so the work per token grows with t
# and the total work with its square; with the cache every forward after the prefill runs one token and scores
# t pairs. The times are the printout above the figure, drawn again in the box under it: tokens 2-11 against the
# last ten, in each mode, as a ratio with its interval, and the whole loop. The work predicts what to expect:
# without a cache the last ten forwards run 70 to 79 tokens instead of 17 to 26, so they should take clearly
# longer; with the cache every forward runs one token and only the attention over the stored keys grows (from
# 17-26 keys to 70-79), so whatever difference the cached line shows should be much smaller than the uncached
# one: compare the two printed ratios. A verdict of "too noisy to tell" means these repeats could not decide;
# rerun the cell on a quieter machine.
#
# **Try it.** Move `prompt tokens`: the cell runs the guide's two `generate` calls, `use_cache=False` and the
# default, after that many tokens of the reference text, 9 new tokens each, and adds the point to the plot (16
# and 128 are measured before the control first draws at 64; every setting you try stays on it). A streamer that
# only notes when each new token arrives (`timing.DecodeClock`, passed as `streamer=`) splits each call into the
# prefill, up to the first new token, and the 8 decode steps after it. Each point on the left is the median of
# those 8 steps, its bar their IQR. The status line under the plot says how long the move took.
#
# Without a cache, each of those steps runs a forward over the whole prompt plus the tokens generated so far, so
# the left-hand `use_cache=False` line should climb with the prompt, while each step of the default runs one
# token and its line should stay nearly level (only the attention over the stored keys grows). On the right,
# the prefill is one forward over the whole prompt in both calls, so there the two lines should run close
# together (each point there is a single reading, which a busy machine can move): the cache does not make the
# prompt cheaper, it makes every token after it cheap. The box under the
# plot compares, for each call, the steps after the longest prompt measured with those after the shortest: read
# the verdicts there rather than the shape of a line. Each length is one call of 8 steps, not interleaved repeats:
# a default verdict of *faster* after the longer prompt, which only adds work, is the machine drifting between
# the two calls, not the cache.

# %%
decode_seconds = {"use_cache=False": {}, "default (DynamicCache)": {}}  # {prompt tokens: Timing of the 8 steps}
first_token_seconds = {"use_cache=False": {}, "default (DynamicCache)": {}}  # {prompt tokens: seconds}


def time_generate(prompt_tokens):
    ids = text.prompt_ids(tokenizer, prompt_tokens)  # (1, prompt_tokens)
    for label, options in {"use_cache=False": {"use_cache": False}, "default (DynamicCache)": {}}.items():
        clock = timing.DecodeClock()  # a streamer that only notes the time each new token arrives
        model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), do_sample=False, max_new_tokens=9,
                       min_new_tokens=9, streamer=clock, **options)
        decode_seconds[label][prompt_tokens] = timing.Timing(label, clock.step_seconds)
        first_token_seconds[label][prompt_tokens] = clock.prefill_seconds
    return plot_generate_time(decode_seconds, first_token_seconds, current=prompt_tokens, max_tokens=256,
                              title=f"SmolLM2, {prompt_tokens}-token prompt (circled), 9 new tokens",
                              verdicts=latency.prompt_growth(decode_seconds))


for prompt_tokens in ([] if QUICK else (16, 128)):  # two lengths first: the first picture has a verdict
    time_generate(prompt_tokens)


live(time_generate, prompt_tokens=widgets.IntSlider(value=64, min=16, max=256, step=16, continuous_update=False,
                                                    description="prompt tokens"))

# %% [markdown]
# ## 4. How many bytes does each token cost?
#
# **Predict first.** Each token adds, in every one of the 30 layers, a key and a value of 3 heads × 64 numbers,
# stored as float32 (4 bytes). How many bytes per token is that? Write your guess in the next cell.

# %%
guess = None  # bytes per token: your guess

# %%
# NBVAL_CHECK_OUTPUT
per_token = formula.kv_bytes_per_token(model.config, torch.float32)
display(score(guess, per_token, unit=" B", kind="amount"))

# %%
# NBVAL_CHECK_OUTPUT
print(f"2 (K and V) × 30 layers × 3 kv heads × 64 head_dim × 4 bytes = {number(per_token)} bytes per token")

# %% [markdown]
# Now measure it: a 128-token prompt and 32 new tokens through `generate`'s default cache, inside `kvlab.watch`.

# %%
# NBVAL_CHECK_OUTPUT
long_prompt = text.prompt_ids(tokenizer, 128)  # (1, 128)
with kvlab.watch(model) as watch:
    model.generate(input_ids=long_prompt, attention_mask=torch.ones_like(long_prompt), do_sample=False,
                   max_new_tokens=32, min_new_tokens=32)
cache = watch.caches[-1]  # the DynamicCache generate built (a plain DynamicCache again after the block)
tokens = cache.get_seq_length()
print("layer 0 keys:", tuple(cache.layers[0].keys.shape), cache.layers[0].keys.dtype)
print(f"tokens in the cache: {tokens}  (128 + 32 − 1)")
measured, expected = watch.trace.summary()["final_bytes"], formula.kv_bytes(model.config, tokens)
print(f"measured: {number(measured)} bytes;  formula: {number(expected)} bytes")

# %% [markdown]
# Measured and formula agree to the byte: a DynamicCache of full-attention layers holds exactly the keys and
# values of every token it has seen, nothing more. kvlab measures *allocations* (each tensor storage once), so
# when the two differ in later notebooks (sliding windows, static pre-allocation, quantization) the difference
# is real memory, not bookkeeping.

# %%
growth.plot_growth(watch.trace, formula_bytes_per_token=per_token,
                   title="SmolLM2 DynamicCache: measured bytes against the formula")

# %% [markdown]
# ## Takeaway
#
# - `generate` uses a `DynamicCache` by default; `use_cache=False` turns it off, and a
#   `DynamicCache(config=model.config)` you build can be passed in (`past_key_values=`, spelled `cache=` in
#   transformers 5.25). `kvlab.watch` records any of them without changing the code.
# - A KV cache stores, for each attention layer, the keys and values of every token so far:
#   `2 × layers × kv_heads × head_dim × bytes` per token (46,080 B for SmolLM2 in float32: 45 KiB).
# - It trades that memory for time: after the prefill a step runs one token instead of the whole sequence, so the
#   query-key pairs of the token at position t are t instead of t × t: the work per new token still grows with
#   the position, but only with the attention over the stored keys, not with a forward over the whole sequence.
#   How closely the time follows the work on your machine is the verdicts of section 3, printed and drawn under
#   both of its figures.
# - On the four prompts checked here (float32, greedy, 12 new tokens each) it did not change a single token; the
#   logits differed only by float32 rounding.
#
# **Next:** [01 · DynamicCache](01_dynamic_cache.ipynb): how the cache grows layer by layer, and what happens
# on Gemma 3, whose sliding-window layers stop growing at 512 tokens.
