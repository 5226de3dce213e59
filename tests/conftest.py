"""Shared fixtures. Real models load once per session (they are prepared by `make test` beforehand)."""

from __future__ import annotations

import os
import warnings

import pytest
import torch

import kvlab
import kvlab.models.tiny
from kvlab import _compat

warnings.filterwarnings("ignore", message=".*falling back to its reference PyTorch implementation.*")
# Notebooks under nbval take their short timing runs (their checked outputs are counts, the same either way);
# the committed outputs come from full runs on a quiet machine. Kernels inherit this process's environment.
os.environ.setdefault("KVLAB_QUICK", "1")


@pytest.fixture(autouse=True, scope="session")
def one_torch_thread():
    """One torch thread for the test process. On a CPU that other jobs share (browser-test servers, notebook
    kernels, a busy CI host), a second thread made small-model generation 7-35x slower; alone it gains < 2x."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)


@pytest.fixture(autouse=True, scope="session")
def measured_layer_facts(tmp_path_factory):
    """The meta device's layer facts are measured, not read from a memo an earlier kvlab wrote in kvlab's home."""
    from kvlab.size import meta

    here = tmp_path_factory.mktemp("layer-facts")
    original, meta.memo_dir = meta.memo_dir, lambda: here
    yield
    meta.memo_dir = original


def accelerators() -> list[str]:
    """The accelerator this machine has, if any: CUDA (or ROCm, which torch also calls cuda), else Apple's MPS."""
    if torch.cuda.is_available():
        return ["cuda"]
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return ["mps"]
    return []


@pytest.fixture(params=["cpu", *accelerators()])
def device(request) -> torch.device:
    """Each device-sensitive test runs on the CPU, and again on the accelerator when this machine has one."""
    return torch.device(request.param)


@pytest.fixture(scope="session")
def byte_tokenizer():
    """The tiny models' tokenizer (vocab 128: one id per UTF-8 byte, folded into ids 3..127), kvlab's own: what the
    explorer gives them, and what `kvlab.measure.text.token_windows` cuts windows from, with no tokenizer file."""
    from kvlab.explorer.models import ByteTokenizer

    return ByteTokenizer()


def greedy_generate(model, ids, cache=None, new_tokens=8, *, logits=False, **generate_kwargs):
    """transformers' greedy `generate` of exactly `new_tokens` tokens after `ids` (batch, prompt_tokens), or after
    a tokenizer's output (its input_ids and padding mask), into `cache` (None: generate builds its own, from
    `generate_kwargs` such as cache_implementation). Returns the sequences (batch, prompt_tokens + new_tokens);
    with `logits=True`, (sequences, the raw logits stacked (new_tokens, batch, vocab)). Every default (all-ones
    attention mask, pad id 0) can be overridden."""
    if not isinstance(ids, torch.Tensor):  # a tokenizer's output: a left-padded batch brings its own mask
        generate_kwargs = {"attention_mask": ids["attention_mask"], **generate_kwargs}
        ids = ids["input_ids"]
    kwargs = {
        "attention_mask": torch.ones_like(ids),
        "do_sample": False,
        "max_new_tokens": new_tokens,
        "min_new_tokens": new_tokens,
        "pad_token_id": 0,
        **generate_kwargs,
    }
    if cache is not None:
        kwargs[_compat.cache_kwarg(model)] = cache
    out = model.generate(ids, return_dict_in_generate=True, output_logits=logits, **kwargs)
    return (out.sequences, torch.stack(out.logits)) if logits else out.sequences


@pytest.fixture(scope="session")
def greedy():
    """The tests' one greedy generation helper: greedy(model, ids, cache=None, new_tokens=8, logits=False, **kw)
    (`greedy_generate`)."""
    return greedy_generate


@pytest.fixture(scope="session")
def smollm2():
    """(model, tokenizer) of SmolLM2-135M-Instruct in float32."""
    return kvlab.load("smollm2")


@pytest.fixture(scope="session")
def gemma3():
    """(model, tokenizer) of Gemma 3 270M in float32."""
    return kvlab.load("gemma3")


@pytest.fixture(scope="session")
def tiny():
    """tiny(name) -> a cached seeded random-weight model."""
    cache: dict[str, torch.nn.Module] = {}

    def get(name: str):
        if name not in cache:
            cache[name] = kvlab.tiny_model(name)
        return cache[name]

    return get


@pytest.fixture(scope="session")
def tiny_llama_dir(tmp_path_factory):
    """tiny-llama saved as a local model directory (config, safetensors, a word-level tokenizer over its 128 ids):
    what `kvlab.load(path)` and `kvlab run --model PATH` take, in a second and with no download."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    path = tmp_path_factory.mktemp("models") / "tiny-llama"
    words = "the cache holds keys and values hello".split()
    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2, "<unk>": 3} | {word: 4 + i for i, word in enumerate(words)}
    vocab |= {f"w{i}": i for i in range(len(vocab), 128)}  # every id the model can generate decodes
    tokenizer = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tokenizer.pre_tokenizer = pre_tokenizers.Whitespace()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tokenizer, unk_token="<unk>", pad_token="<pad>", bos_token="<s>", eos_token="</s>"
    )
    kvlab.tiny_model("tiny-llama").save_pretrained(path)
    fast.save_pretrained(path)
    return path


@pytest.fixture
def unbuilt_quanto(monkeypatch):
    """This process has not loaded quanto's extension and the probe says it is not built: what a fresh machine sees.
    The build itself is quanto's real one (on a machine where it is built, loading the library is all it does)."""
    from kvlab.caches import quantized

    probed = []
    monkeypatch.setattr(quantized, "_quanto_ready", set())
    monkeypatch.setattr(quantized, "_extension_built", lambda extension: probed.append(extension.name) or False)
    return probed


SLIDING_WINDOW = 4  # the window of `sliding_config`'s sliding layer


@pytest.fixture
def sliding_config():
    """A two-layer Gemma 3 config without weights: layer 0 sliding (window 4), layer 1 full attention, one KV head of
    dim 1, so a cache filled by hand reads as a list of positions. A new one per test (tests change layer_types)."""
    import transformers

    return transformers.Gemma3TextConfig(
        num_hidden_layers=2,
        sliding_window=SLIDING_WINDOW,
        num_key_value_heads=1,
        num_attention_heads=1,
        head_dim=1,
        hidden_size=8,
        intermediate_size=8,
        vocab_size=16,
        layer_types=["sliding_attention", "full_attention"],
    )


@pytest.fixture
def prompt_ids():
    """prompt_ids(n, seed=0) -> (1, n) random token ids for the tiny models (vocab 128, ids 3..127)."""

    def make(n: int, seed: int = 0, batch: int = 1) -> torch.Tensor:
        return torch.randint(3, kvlab.models.tiny.TINY_VOCAB, (batch, n), generator=torch.Generator().manual_seed(seed))

    return make
