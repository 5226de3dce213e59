"""Every mistake a user can make is one line naming what is valid, raised before any work is lost; an accepted
combination never crashes mid-generation.

The property test draws option sets at random (fixed seed): each is either refused up front with one line, or
generates to the end; and what kvlab refuses for a quantized cache, transformers' own class crashes on."""

from __future__ import annotations

import random

import pytest
import torch
import transformers
from transformers import QuantizedCache

import kvlab
from kvlab.caches import CacheOptionError
from kvlab.cli import main
from kvlab.explorer import models as explorer_models
from kvlab.explorer.models import ByteTokenizer, ModelStore
from kvlab.explorer.session import RunRequest, Session
from kvlab.models import ModelLoadError, UnknownModelError
from kvlab.models.tiny import tiny_config
from kvlab.paths import KvlabHomeError


def one_line(capsys, command: str) -> str:
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"kvlab {command}: error:") and len(err.splitlines()) == 1 and "Traceback" not in err, err
    return err


@pytest.fixture(scope="module")
def all_sliding():
    """tiny-gemma3 with every layer sliding: there is no full-attention layer to offload."""
    config = tiny_config("tiny-gemma3")
    config.layer_types = ["sliding_attention"] * config.num_hidden_layers
    torch.manual_seed(0)
    return transformers.AutoModelForCausalLM.from_config(config).eval()


def test_a_kvlab_home_that_cannot_be_written_is_named(tmp_path, monkeypatch, capsys):
    # Before: a raw PermissionError (also from `kvlab models list`), not naming KVLAB_HOME.
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("KVLAB_HOME", str(blocker / "kvlab"))
    assert main(["models", "list"]) == 0  # listing writes nothing
    assert "not prepared" in capsys.readouterr().out
    assert main(["models", "prepare", "smollm2"]) == 2
    assert f"KVLAB_HOME={blocker / 'kvlab'}" in one_line(capsys, "models")
    with pytest.raises(KvlabHomeError, match="set KVLAB_HOME to a writable directory"):
        kvlab.load("smollm2")


def test_an_empty_prompt_is_refused_before_the_model_runs(smollm2, capsys):
    # Before: RuntimeError: cannot reshape tensor of 0 elements.
    model, tokenizer = smollm2
    with pytest.raises(ValueError, match=r"the prompt is empty \(0 tokens\)"):
        kvlab.run(model, tokenizer, "", cache="dynamic", max_new_tokens=3)
    with pytest.raises(ValueError, match="the prompt is empty"):
        kvlab.generate(model, torch.zeros((1, 0), dtype=torch.long), max_new_tokens=3)
    assert main(["run", "--model", "smollm2", "--cache", "static", "--prompt", "", "--max-new-tokens", "3"]) == 2
    assert "the prompt is empty" in one_line(capsys, "run")


def test_group_sizes_are_checked_against_the_model_before_anything_is_allocated(smollm2, capsys):
    # Before: q_group_size=7 passed; hqq failed at generate time with a tensor-size error, quanto with
    # "Group size (7) must be a divisor of (960)".
    model, tokenizer = smollm2
    with pytest.raises(CacheOptionError, match="q_group_size must be a multiple of 2; got 7"):
        kvlab.make_cache("quantized", model.config, backend="hqq", q_group_size=7)
    with pytest.raises(
        CacheOptionError,
        match=r"quanto at axis 0 .* 3 x S x 64; at S=5 tokens \(the prompt\) that "
        r"is 960, which 7 does not divide. Valid for every length: 1, 2, 3, 4",
    ):
        kvlab.run(model, tokenizer, "The cache holds a lot", cache="quantized", backend="quanto", q_group_size=7)
    args = [
        "run",
        "--model",
        "smollm2",
        "--prompt",
        "The cache holds a lot",
        "--no-chat-template",
        "--max-new-tokens",
        "3",
        "--cache",
        "quantized",
        "--q-group-size",
        "7",
    ]
    assert main(args + ["--backend", "hqq"]) == 2
    assert "or axis_key=axis_value=1, where kvlab pads" in one_line(capsys, "run")
    assert main(args + ["--backend", "quanto"]) == 2
    assert "which 7 does not divide" in one_line(capsys, "run")
    # the same options work where they divide: at axis 1 hqq pads for any group size
    result = kvlab.run(
        model,
        tokenizer,
        "The cache holds a lot",
        cache="quantized",
        backend="hqq",
        q_group_size=7,
        axis_key=1,
        axis_value=1,
        residual_length=2,
        max_new_tokens=4,
    )
    assert result.trace.summary()["flushes"] > 0


def test_offloading_with_nothing_to_offload_is_refused_up_front(all_sliding, prompt_ids):
    # Before: ValueError: True is not in list, in the first forward of generate.
    ids = prompt_ids(10)
    for call in (
        lambda: kvlab.make_cache("offloaded", all_sliding.config, offload_only_non_sliding=True),
        lambda: kvlab.make_cache("offloaded_static", all_sliding.config, max_cache_len=32),
        lambda: kvlab.run(all_sliding, None, ids, cache="offloaded_static", max_new_tokens=3),
        lambda: kvlab.generate(all_sliding, ids, cache_implementation="offloaded_static", max_new_tokens=3),
    ):
        with pytest.raises(CacheOptionError, match="offload_only_non_sliding=True offloads only the non-sliding"):
            call()
    # the valid choice named in the message works, and transformers' own class fails as kvlab said it would
    result = kvlab.run(
        all_sliding, None, ids, cache="offloaded_static", offload_only_non_sliding=False, max_new_tokens=3
    )
    assert result.trace.summary()["transfers"] > 0
    _, cache = kvlab.generate(
        all_sliding,
        ids,
        cache_implementation="offloaded_static",
        max_new_tokens=3,
        cache_config={"offload_only_non_sliding": False},
        do_sample=False,
        pad_token_id=0,
    )
    assert cache.only_non_sliding is False and cache.trace.summary()["transfers"] > 0
    theirs = transformers.StaticCache(config=all_sliding.config, max_cache_len=32, offloading=True)
    with pytest.raises(Exception, match="True is not in list|CUDA"):
        all_sliding.generate(ids, cache=theirs, max_new_tokens=3, do_sample=False, pad_token_id=0)


def test_model_loading_mistakes_are_one_line(tmp_path):
    with pytest.raises(UnknownModelError, match="bundled models: smollm2, gemma3"):
        kvlab.load("llama-9000")
    (tmp_path / "config.json").write_text(tiny_config("tiny-llama").to_json_string())
    with pytest.raises(ModelLoadError, match="kvlab loads safetensors weights only") as err:
        kvlab.load(str(tmp_path))
    assert "\n" not in str(err.value)


def test_the_explorer_reports_one_line(tiny, monkeypatch):
    session = Session(ModelStore(tiny("tiny-llama"), ByteTokenizer()))
    with pytest.raises(CacheOptionError, match="multiple of 2; got 7"):
        session.start(RunRequest(model="loaded", cache="quantized", options={"backend": "hqq", "q_group_size": 7}))
    errors = []
    # Models load once per process: another test in this worker may have loaded tiny-llama already, and then the
    # check would run before the thread starts. An empty store makes the model load in the thread, where the
    # shape check runs and reaches on_error.
    monkeypatch.setattr(explorer_models, "_SHARED", {})
    session = Session()
    session.start(
        RunRequest(
            model="tiny-llama",
            prompt="The KV cache keeps keys.",
            cache="quantized",
            max_new_tokens=3,
            options={"backend": "quanto", "q_group_size": 7},
        ),
        on_error=lambda r, m: errors.append(m),
    )
    assert session.wait(60)
    assert len(errors) == 1 and "\n" not in errors[0] and "which 7 does not divide" in errors[0]


# -- property: random option sets are refused in one line, or run to the end ------------------------------------
def draw_quantized(rng: random.Random) -> dict:
    backend = rng.choice(["hqq", "quanto", "fp8"])
    if backend == "fp8":
        return {"backend": "fp8"}
    axes = (0, 1) if backend == "hqq" else (0, -1)
    options = {
        "backend": backend,
        "nbits": rng.choice((1, 2, 3, 4, 8) if backend == "hqq" else (2, 4)),
        "axis_key": rng.choice(axes),
        "axis_value": rng.choice(axes),
        "q_group_size": rng.choice([1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 24, 32, 48, 64, 96, 128]),
        "residual_length": rng.choice([1, 2, 3, 5, 8]),
    }
    return {k: v for k, v in options.items() if k == "backend" or rng.random() < 0.8}


def test_random_option_sets_are_refused_in_one_line_or_generate(prompt_ids):
    rng = random.Random(4)
    model = kvlab.tiny_model("tiny-llama")
    seen = {"refused": 0, "generated": 0}
    for _ in range(60):
        options, prompt, new = draw_quantized(rng), rng.randint(1, 9), rng.randint(1, 7)
        ids = prompt_ids(prompt, seed=prompt)
        try:
            result = kvlab.run(
                model,
                None,
                ids,
                cache="quantized",
                max_new_tokens=new,
                generate_kwargs={"min_new_tokens": new},
                **options,
            )
        except CacheOptionError as err:
            assert "\n" not in str(err) and ("valid" in str(err).lower()), err
            seen["refused"] += 1
            if options["backend"] == "quanto" or "multiple of" in str(err):  # transformers' own class crashes
                backend = options.pop("backend")
                with pytest.raises((ValueError, RuntimeError)):
                    model.generate(
                        ids,
                        cache=QuantizedCache(backend, model.config, **options),
                        max_new_tokens=new,
                        min_new_tokens=new,
                        do_sample=False,
                        pad_token_id=0,
                    )
            continue
        assert len(result.generated_token_ids) == new and result.trace.summary()["steps"] == new
        seen["generated"] += 1
    assert seen["refused"] >= 8 and seen["generated"] >= 8


# -- every error kvlab defines is a user error or an environment error -------------------------------------------
def test_every_kvlab_error_class_subclasses_one_of_the_two_bases():
    """The CLI and the explorer catch `KvlabUserError` and `KvlabEnvironmentError`: an error class that
    subclasses neither would show a traceback for a user's mistake, so a new one cannot be forgotten here."""
    import importlib
    import inspect
    import pkgutil

    from kvlab.errors import KvlabEnvironmentError, KvlabUserError

    found = {}
    for info in pkgutil.walk_packages(kvlab.__path__, "kvlab."):
        if info.name.endswith("__main__"):  # running it is the command line
            continue
        module = importlib.import_module(info.name)
        for name, cls in inspect.getmembers(module, inspect.isclass):
            if issubclass(cls, Exception) and not issubclass(cls, Warning) and cls.__module__ == info.name:
                found[f"{info.name}.{name}"] = cls
    bases = (KvlabUserError, KvlabEnvironmentError)
    assert {name for name, cls in found.items() if not issubclass(cls, bases) and cls not in bases} == set()
    assert {
        name
        for name, cls in found.items()
        if issubclass(cls, KvlabUserError) and issubclass(cls, KvlabEnvironmentError)
    } == set()
    assert {"kvlab.caches.options.CacheOptionError", "kvlab.atomic.AtomicWriteError"} <= set(found)
