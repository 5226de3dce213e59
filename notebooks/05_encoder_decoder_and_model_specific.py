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
# # 05 · Encoder-decoder and model-specific caches
#
# **Learning goal.** Build an `EncoderDecoderCache` from two caches and pass it to `generate` (the guide's section on
# it says it manages a self-attention and a cross-attention cache, each of which may be set to another kind, and
# shows no code for it: the calls here are kvlab's, made of transformers' classes); tell apart the three shapes a
# cache can take: an encoder-decoder's cross-attention cache, fixed at the source length; a decoder's
# self-attention cache, growing per token; and a state-space (Mamba) layer's state, constant whatever the length.
# Recognise them mixed in one hybrid model (Jamba).
#
# **In kvlab's words.** An encoder-decoder (BART, T5, Whisper) runs its encoder once over the source. Every
# decoder layer attends twice: to the decoder's own tokens (*self-attention*, which grows like any KV cache) and
# to the encoder's output (*cross-attention*, whose keys and values are computed once and never change).
# transformers' `EncoderDecoderCache` takes two ordinary caches, one for each (self-attention first: its
# docstring in `transformers/cache_utils.py`, 5.25), and section 1 prints what each half holds. A Mamba layer is
# different in kind: it folds the whole past into a fixed-size state (a short convolution window and a recurrent
# state) that it overwrites every step (`LinearAttentionLayer.update_conv_state` and `update_recurrent_state`
# in the same file copy the new state into the old tensors), and section 2 prints those states' shapes.
#
# **The models here have random weights** (`kvlab.tiny_model`, seeded, a vocabulary of 128): their text is noise.
# They have the real architectures of BART, Llama, Mamba and Jamba at toy sizes, and the cache *structure*, not
# the text, is the lesson. `min_new_tokens` keeps them from stopping early on a random end-of-sequence token.
# The guide passes a cache as `past_key_values=`; transformers 5.25 calls that argument `cache=` and still
# accepts the old name with a deprecation warning, silenced below (`generate` carries
# `@deprecate_kwarg("past_key_values", ..., new_name="cache")` in `transformers/generation/utils.py`).

# %%
# %matplotlib inline
import warnings

import ipywidgets as widgets
import torch
import transformers
from transformers import DynamicCache, EncoderDecoderCache, StaticCache

import kvlab
from kvlab.i18n import attention_role_label, layer_kind_label, number
from kvlab.live import live
from kvlab.plots import growth
from kvlab.predictions import score

warnings.filterwarnings("ignore", message=".*past_key_values.*deprecated.*")
torch.manual_seed(0)
transformers.logging.set_verbosity_error()  # the tiny Mamba layers say they use the reference kernels


def random_prompt(n: int, seed: int = 0) -> torch.Tensor:
    """(1, n) token ids: the tiny models' input is noise anyway."""
    return torch.randint(3, 128, (1, n), generator=torch.Generator().manual_seed(seed))


# %% [markdown]
# ## 1. EncoderDecoderCache (Cache de encoder-decoder)
#
# tiny-bart: 2 decoder layers, 4 heads × 16. The cache is built by hand, one `DynamicCache` for the decoder's
# self-attention and one for its cross-attention, and handed to `generate`. We translate a 12-token source into
# 10 tokens.

# %%
# NBVAL_CHECK_OUTPUT
bart = kvlab.tiny_model("tiny-bart")
source = random_prompt(12)
past_key_values = EncoderDecoderCache(DynamicCache(config=bart.config), DynamicCache(config=bart.config))
out = bart.generate(input_ids=source, attention_mask=torch.ones_like(source), do_sample=False, max_new_tokens=10,
                    min_new_tokens=10, past_key_values=past_key_values)
print(out)
print(type(past_key_values).__name__, "after generate:")
print("  self-attention cache: ", past_key_values.self_attention_cache.get_seq_length(), "tokens")
print("  cross-attention cache:", past_key_values.cross_attention_cache.get_seq_length(), "tokens")

# %% [markdown]
# The self-attention cache holds the decoder's tokens: the start token plus 9 generated ones fed back (the
# 10th new token is never fed). The cross-attention cache holds the 12 source positions.
#
# Building the cache by hand is optional. Called without one, as the guide calls `generate`, `bart.generate`
# sees an encoder-decoder model and builds its `EncoderDecoderCache` itself; with `return_dict_in_generate=True`
# it hands that cache back as `past_key_values`, so we can look inside:

# %%
# NBVAL_CHECK_OUTPUT
generated = bart.generate(input_ids=source, attention_mask=torch.ones_like(source), do_sample=False,
                          max_new_tokens=10, min_new_tokens=10, return_dict_in_generate=True)
built = generated.past_key_values  # no cache passed in: this one is generate's own
self_cache, cross_cache = built.self_attention_cache, built.cross_attention_cache


def bytes_held(cache):  # keys and values of every layer
    return sum(layer.keys.nbytes + layer.values.nbytes for layer in cache.layers)


print(type(built).__name__, "built by generate, of", type(self_cache).__name__, "and", type(cross_cache).__name__)
print(f"  self-attention cache:  {self_cache.get_seq_length()} tokens, keys of a layer "
      f"{tuple(self_cache.layers[0].keys.shape)}, {number(bytes_held(self_cache))} bytes in its 2 layers")
print(f"  cross-attention cache: {cross_cache.get_seq_length()} tokens, keys of a layer "
      f"{tuple(cross_cache.layers[0].keys.shape)}, {number(bytes_held(cross_cache))} bytes in its 2 layers")
if torch.equal(generated.sequences, out):
    print("the same tokens as with the hand-built cache")
else:
    print("other tokens than with the hand-built cache")

# %% [markdown]
# The same two `DynamicCache`s, the same 10 and 12 tokens, the same text. Building the cache by hand is for
# choosing what goes into each half (section 1 ends with a static self-attention half), or for keeping the
# cache to continue later.
#
# **Predict first.** Now the hand-built call of the first cell inside `kvlab.watch`, for a 12-token and then a
# 24-token source. The 12-token source gave each decoder layer's cross-attention 6,144 bytes (12 tokens × K and
# V × 4 heads × 16 × 4 bytes). How many bytes will the cross-attention hold in total, both layers, for the
# 24-token source?

# %%
guess = None  # bytes, both layers' cross-attention, 24-token source: your guess

# %%
# NBVAL_CHECK_OUTPUT
bart_traces = {}
for source_tokens in (12, 24):
    source = random_prompt(source_tokens)
    with kvlab.watch(bart) as watch:
        past_key_values = EncoderDecoderCache(DynamicCache(config=bart.config), DynamicCache(config=bart.config))
        bart.generate(input_ids=source, attention_mask=torch.ones_like(source), do_sample=False, max_new_tokens=10,
                      min_new_tokens=10, past_key_values=past_key_values)
    bart_traces[source_tokens] = watch.trace
    print(f"source of {source_tokens} tokens ({watch.trace.meta['cache_class']}):")
    for row in watch.trace.layer_table():
        print(f"  {attention_role_label(row['role']):>5} layer {row['layer_idx']}: {row['logical_length']:>2} tokens, "
              f"{number(row['bytes_held']):>6} bytes")
cross_bytes = sum(r["bytes_held"] for r in bart_traces[24].layer_table() if r["role"] == "cross")
display(score(guess, cross_bytes, unit=" B", kind="amount"))

# %% [markdown]
# The trace tags each layer with its role: `self` for the decoder's own tokens, `cross` for the encoder's. The
# self-attention rows are the same for both sources (10 tokens, 5,120 bytes a layer); the cross-attention rows
# doubled with the source. Step by step, with a longer generation:

# %%
source = random_prompt(24)
with kvlab.watch(bart) as watch:
    past_key_values = EncoderDecoderCache(DynamicCache(config=bart.config), DynamicCache(config=bart.config))
    bart.generate(input_ids=source, attention_mask=torch.ones_like(source), do_sample=False, max_new_tokens=24,
                  min_new_tokens=24, past_key_values=past_key_values)
growth.plot_growth(watch.trace,
                   title="tiny-bart (random weights): self- and cross-attention bytes held vs decoder tokens seen")

# %% [markdown]
# The self-attention part starts with one token (the decoder's start token) and grows by one per step; the
# cross-attention part is filled once, on the first decoder step, with the encoder's keys and values for all 24
# source tokens, and then never changes. For a long source (a 30-second Whisper clip is 1,500 encoder frames;
# source: Radford et al. 2022, the Whisper paper)
# the cross-attention part can be most of the cache, and it is the same size at the first token as at the last.
#
# The two halves need not be the same kind of cache. Here the self-attention half is a `StaticCache`
# (pre-allocated to 32 slots), the cross-attention half stays dynamic:

# %%
# NBVAL_CHECK_OUTPUT
source = random_prompt(12)
with kvlab.watch(bart) as watch:
    past_key_values = EncoderDecoderCache(StaticCache(config=bart.config, max_cache_len=32),
                                          DynamicCache(config=bart.config))
    bart.generate(input_ids=source, attention_mask=torch.ones_like(source), do_sample=False, max_new_tokens=10,
                  min_new_tokens=10, past_key_values=past_key_values)
for row in watch.trace.layer_table():
    print(f"{attention_role_label(row['role']):>5} layer {row['layer_idx']}: {row['logical_length']:>2} tokens live in "
          f"{row['slots_allocated']:>2} slots, {number(row['bytes_held']):>6} bytes")

# %% [markdown]
# Each half behaves as its own class would alone: the static half holds 32 slots from the start (22 of them
# masked), the dynamic half exactly the 12 source tokens.
#
# **Live.** Move the source length and the number of new tokens: the `EncoderDecoderCache` call of section 1 runs
# again under `kvlab.watch` and the plot is redrawn.

# %%
def self_vs_cross(source_tokens, new_tokens):
    source = random_prompt(source_tokens)
    with kvlab.watch(bart) as watch:
        past_key_values = EncoderDecoderCache(DynamicCache(config=bart.config), DynamicCache(config=bart.config))
        bart.generate(input_ids=source, attention_mask=torch.ones_like(source), do_sample=False,
                      max_new_tokens=new_tokens, min_new_tokens=new_tokens, past_key_values=past_key_values)
    return growth.plot_growth(watch.trace, title=f"tiny-bart: {source_tokens}-token source, {new_tokens} new tokens")


live(self_vs_cross,
     source_tokens=widgets.IntSlider(value=24, min=4, max=128, step=4, continuous_update=False,
                                     description="source tokens"),
     new_tokens=widgets.IntSlider(value=24, min=4, max=96, step=4, continuous_update=False, description="new tokens"))

# %% [markdown]
# ## 2. Mamba (Caches específicos de modelo)
#
# The guide says Mamba models need a cache of their own: they have no attention, so no keys and values. In
# transformers 5.25, the release used here, there is no separate Mamba cache class (no `MambaCache` anywhere in
# its source): `generate` builds a plain `DynamicCache` whose layers are `LinearAttentionLayer`s, each holding a
# convolution state and a recurrent state instead of keys and values (the table further down prints the class of
# the cache `generate` built for tiny-mamba). The guide shows no code for it; here it is built by hand as notebook
# 00 builds a `DynamicCache` for a decoder (`DynamicCache(config=...)`), and handed to tiny-mamba (3 Mamba layers):

# %%
# NBVAL_CHECK_OUTPUT
mamba = kvlab.tiny_model("tiny-mamba")
print("layer types:", mamba.config.layer_types)
prompt = random_prompt(8)
past_key_values = DynamicCache(config=mamba.config)
mamba.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False, max_new_tokens=16, min_new_tokens=16,
               past_key_values=past_key_values)
for idx, layer in enumerate(past_key_values.layers):
    conv, recurrent = layer.conv_states[0], layer.recurrent_states[0]
    print(f"layer {idx}: {type(layer).__name__}, conv state {tuple(conv.shape)}, recurrent state {tuple(recurrent.shape)}")

# %% [markdown]
# The convolution state keeps the last 4 inputs of each of the 128 inner channels (`conv_kernel=4`), the
# recurrent state 8 numbers per channel (`state_size=8`): nothing in either shape counts tokens. Up to
# transformers 5.24 such a cache could not even say how many tokens it had seen (`get_seq_length` raised a
# `ValueError`: "can only be called on Attention layers"). From 5.25, the release used here, each
# `LinearAttentionLayer` keeps a counter of its own beside its states (`cumulative_length_linear`, a 0-dim
# tensor), so it answers: the 8 prompt tokens and 15 of the 16 generated ones (the last is never fed back):

# %%
# NBVAL_CHECK_OUTPUT
past_key_values.get_seq_length()

# %% [markdown]
# Next: 64 tokens after an 8-token prompt with tiny-llama (3 attention layers, 2 KV heads × 16, float32),
# tiny-mamba (3 Mamba layers) and tiny-jamba (a hybrid that alternates Mamba and attention layers, section 3).
#
# **Predict first.** How many bytes does tiny-llama's cache add per generated token? How many bytes does
# tiny-mamba's cache hold after the 8-token prompt (the shapes of its states are printed above)? And which of
# tiny-jamba's layers grow with the tokens: the attention layers ("full"), the Mamba layers ("linear"), "both" or
# "neither"? Answer the last with one of the four quoted words.

# %%
guess_llama = None  # bytes tiny-llama's cache adds per token: your guess
guess_mamba = None  # bytes tiny-mamba's cache holds after the prompt: your guess
guess_jamba = None  # which of tiny-jamba's layers grow, one of the four quoted words of the question: your guess

# %%
TINY = {name: kvlab.tiny_model(name) for name in ("tiny-llama", "tiny-mamba", "tiny-jamba")}
traces = {}
for name, model in TINY.items():
    with kvlab.watch(model) as watch:
        model.generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False, max_new_tokens=64,
                       min_new_tokens=64)
    traces[name] = watch.trace
    traces[name].meta["prompt_tokens"] = prompt.shape[-1]  # a Mamba cache counts no tokens: tell the plot the x axis

# %%
# NBVAL_CHECK_OUTPUT
per_token = {name: (t.bytes_by_step()[-1] - t.bytes_by_step()[0]) // (len(t.bytes_by_step()) - 1)
             for name, t in traces.items()}  # fmt: skip
display(score(guess_llama, per_token["tiny-llama"], unit=" B", kind="amount", label="tiny-llama:"))
display(score(guess_mamba, traces["tiny-mamba"].bytes_by_step()[0], unit=" B", kind="amount", label="tiny-mamba:"))

# %%
# NBVAL_CHECK_OUTPUT
for name, trace in traces.items():
    by_step = trace.bytes_by_step()
    kinds = sorted({layer_kind_label(row["layer_kind"], plural=True) for row in trace.layer_table()})  # in words
    print(f"{name:>10} ({trace.meta['cache_class']}, {', '.join(kinds)} layers): {number(by_step[0]):>6} bytes "
          f"after the prompt, {number(by_step[-1]):>6} after {len(by_step) - 1} more tokens, "
          f"+{number((by_step[-1] - by_step[0]) // (len(by_step) - 1))} per token")

# %%
growth.plot_growth(traces, by_layer_kind=False, title="Random-weight tiny models: KV cache vs Mamba state vs hybrid")

# %% [markdown]
# tiny-llama grows by 768 bytes per token (3 layers × K and V × 2 heads × 16 × 4 bytes), at every step of the
# run. tiny-mamba's state is the same 18,432 bytes after 8 tokens as after 71: each of its 3 layers keeps 128
# channels × (4 + 8) float32 numbers, 6,144 bytes, overwritten in place. The tiny Mamba's state is bigger than
# the tiny Llama's KV cache up to 24 tokens (18,432 / 768); past that, the constant state is the smaller one,
# and the gap widens by 768 bytes with every token.
#
# **Live.** Move the number of new tokens: tiny-llama's line crosses tiny-mamba's flat one at 24 tokens seen
# (8 + 16: set 20 new tokens or more to reach it), and the gap after it widens by 768 bytes per token.

# %%
def mamba_vs_llama(new_tokens):
    seen = {}
    for name in ("tiny-llama", "tiny-mamba"):
        with kvlab.watch(TINY[name]) as watch:
            TINY[name].generate(prompt, attention_mask=torch.ones_like(prompt), do_sample=False,
                                max_new_tokens=new_tokens, min_new_tokens=new_tokens)
        seen[name] = watch.trace
        seen[name].meta["prompt_tokens"] = prompt.shape[-1]  # for the Mamba state's x axis (it counts no tokens)
    return growth.plot_growth(seen, by_layer_kind=False, title=f"8-token prompt + {new_tokens} new tokens")


live(mamba_vs_llama,
     new_tokens=widgets.IntSlider(value=32, min=4, max=128, step=4, continuous_update=False, description="new tokens"))

# %% [markdown]
# ## 3. A hybrid: Jamba
#
# tiny-jamba alternates Mamba and attention layers; transformers gives it one `DynamicCache` with a
# `LinearAttentionLayer` where the model has a Mamba layer and a `DynamicLayer` where it has attention. Your
# third guess of section 2, which of its layers grow, is scored here:

# %%
# NBVAL_CHECK_OUTPUT
jamba_kinds = growth.bytes_by_layer_kind(traces["tiny-jamba"])  # {kind: [(tokens seen, bytes), ...]}
grown = [layer_kind_label(kind) for kind, points in jamba_kinds.items() if points[-1][1] > points[0][1]]
answers = dict(both_label="both", neither_label="neither")  # the question's words, in the reader's language
display(score(guess_jamba, grown[0] if len(grown) == 1 else answers["both_label" if grown else "neither_label"],
              kind="choice"))

# %%
# NBVAL_CHECK_OUTPUT
print("layer types:", TINY["tiny-jamba"].config.layer_types)
for row in traces["tiny-jamba"].layer_table():
    print(f"layer {row['layer_idx']} {layer_kind_label(row['layer_kind']):>8}: {row['logical_length']:>2} tokens, "
          f"{number(row['bytes_held']):>6} bytes")
for kind, points in jamba_kinds.items():
    print(f"{layer_kind_label(kind, plural=True)} layers: {number(points[0][1]):>6} bytes after the prompt, "
          f"{number(points[-1][1]):>6} at the end")

# %%
growth.plot_growth(traces["tiny-jamba"], title="tiny-jamba (random weights): linear state vs attention KV")

# %% [markdown]
# Only the attention layers grow; the Mamba layers' state stays flat. A hybrid's memory slope is set by its
# attention layers alone: tiny-jamba's 2 attention layers add 512 bytes per token, against 768 for tiny-llama's 3.
#
# ## Takeaway
#
# - `EncoderDecoderCache(self_cache, cross_cache)` wraps two ordinary caches: a self-attention cache that grows
#   per generated token, and a cross-attention cache fixed at the source length, filled once. The two can be
#   different kinds (static and dynamic above).
# - From transformers 5.24, Mamba's "model-specific cache" is a `DynamicCache` of `LinearAttentionLayer`s: a
#   constant-size state per layer (from 5.25 with a token counter beside it), no tokens stored. A KV cache grows
#   linearly; hybrids grow only in their attention layers.
# - `kvlab.watch` records all three shapes from unchanged transformers code, in the same trace format.
#
# **Next:** [06 · Iterative chat](06_iterative_chat.ipynb): reuse one cache across the turns of a conversation.
