"""Inputs follow the model: every kvlab helper that builds or takes input ids moves them to `model.device`, and
traces record the device of every layer. Runs anywhere (no GPU needed).

How, without a GPU: the model stays on the CPU but reports a pretend accelerator as `model.device`, and the ids a
helper receives (or a tokenizer hands it) record every `.to(...)` asked of them and stay on the CPU. A helper that
forgot `.to(model.device)` records nothing; one that moved them to a fixed device records that device. (The pretend
device is torch's "meta": transformers' own static-cache sizing reads `model.device` too, so static caches that
`generate` builds are left out here; kvlab's own static cache allocates on the device of the first keys.)
"""

from __future__ import annotations

import pytest
import torch

import kvlab
from kvlab.models import parse_device

PRETEND = torch.device("meta")


class Tracked(torch.Tensor):
    """Ids that log `.to(device)` calls; `.to(PRETEND)` keeps them (on the CPU), anything else really moves them."""

    __torch_function__ = torch._C._disabled_torch_function_impl  # results of ops are plain tensors
    moves: list = []

    def to(self, *args, **kwargs):
        target = args[0] if args else kwargs.get("device")
        if isinstance(target, (str, torch.device)):
            Tracked.moves.append(torch.device(target))
            if torch.device(target) == PRETEND:
                return self
        return self.as_subclass(torch.Tensor).to(*args, **kwargs)


def tracked(ids: torch.Tensor) -> Tracked:
    return ids.as_subclass(Tracked)


class Tokenizer:
    """Just enough tokenizer for the helpers: whitespace words -> ids 3..127, as Tracked tensors."""

    pad_token_id = 0
    eos_token_id = 2
    chat_template = None

    def __call__(self, text, return_tensors=None, **kwargs):
        ids = [3 + sum(map(ord, word)) % 125 for word in text.split()]

        class Encoded:
            input_ids = tracked(torch.tensor([ids])) if return_tensors == "pt" else ids

        return Encoded()

    def decode(self, ids, skip_special_tokens=False):
        return " ".join(f"<{i}>" for i in ids)

    def convert_ids_to_tokens(self, ids):
        return [str(i) for i in ids]


@pytest.fixture
def on_pretend_device(monkeypatch):
    """tiny-llama whose `model.device` says PRETEND; its forward inputs are logged as (device, type)."""
    model = kvlab.tiny_model("tiny-llama")
    monkeypatch.setattr(type(model), "device", property(lambda self: PRETEND))
    Tracked.moves = []
    return model


def ids(n: int = 6) -> Tracked:
    return tracked(torch.arange(3, 3 + n).view(1, n))


def helper_calls():
    from kvlab.bench.configs import BenchConfig
    from kvlab.bench.runner import generate_once
    from kvlab.measure import compiled, latency, quality
    from kvlab.measure.guide_table import measure_compile_and_memory

    tok = Tokenizer()
    return {
        "kvlab.run (ids)": lambda m: kvlab.run(m, None, ids(), cache="dynamic", max_new_tokens=2),
        "kvlab.run (text)": lambda m: kvlab.run(
            m,
            tok,
            "the cache holds keys",
            cache="quantized",
            backend="quanto",
            nbits=4,
            q_group_size=16,
            max_new_tokens=2,
        ),
        "kvlab.run (static, kvlab-sized)": lambda m: kvlab.run(
            m, None, ids(), cache="static", max_cache_len=16, max_new_tokens=2
        ),
        "kvlab.generate": lambda m: kvlab.generate(m, ids(), max_new_tokens=2),
        "measure.latency.token_times": lambda m: latency.token_times(m, ids(), 2, repeats=1),
        "measure.quality.teacher_forced": lambda m: quality.teacher_forced(m, ids(), 3),
        "measure.compiled.static_generate (eager)": lambda m: compiled.static_generate(m, ids(), 2, 16),
        "measure.quality.teacher_forced_logits": lambda m: quality.teacher_forced_logits(m, ids(), 3, None),
        "bench.runner.generate_once (plain)": lambda m: generate_once(
            m, None, BenchConfig("dynamic", "dynamic", {}, plain=True), ids(), 2
        ),
        "bench.runner.generate_once (kvlab)": lambda m: generate_once(
            m, None, BenchConfig("dynamic", "dynamic", {}), ids(), 2
        ),
        "guide_table.measure_compile_and_memory": lambda m: measure_compile_and_memory(m, None, ids(), "dynamic"),
    }


@pytest.mark.parametrize("name", list(helper_calls()))
def test_inputs_go_where_the_model_is(on_pretend_device, name):
    helper_calls()[name](on_pretend_device)
    assert Tracked.moves, f"{name} never moved its inputs to model.device"
    assert set(Tracked.moves) == {PRETEND}, f"{name} moved its inputs to {set(Tracked.moves)}, not model.device"


def test_traces_record_the_device_of_every_layer(device):
    for name, cache, options in [
        ("tiny-gemma3", "dynamic", {}),
        ("tiny-llama", "static", {"max_cache_len": 16}),
        ("tiny-llama", "offloaded", {}),
        ("tiny-jamba", "dynamic", {}),
    ]:
        model = kvlab.tiny_model(name).to(device)  # a fresh model: the shared ones stay on the CPU
        result = kvlab.run(model, None, torch.arange(3, 13).view(1, 10), cache=cache, max_new_tokens=3, **options)
        layers = result.trace.layer_table()
        assert len(layers) == len(kvlab.recording.layer_state.layer_kinds(model.config))
        assert {row["device"] for row in layers} == {str(model.device)}, (name, cache)
        updates = [e for e in result.trace.events if e.get("type") == "update"]
        assert updates and all("device" in e for e in updates), (name, cache)
    model = kvlab.tiny_model("tiny-llama").to(device)
    transfers = kvlab.run(
        model, None, torch.arange(3, 13).view(1, 10), cache="offloaded", max_new_tokens=3
    ).trace.transfers
    # on a CPU an offload moves nothing; on an accelerator offloads go cuda:0 -> cpu, prefetches back, bytes real
    assert transfers and all(t["bytes"] > 0 for t in transfers)
    if device.type == "cpu":
        assert all(t["src"] == "cpu" and t["dst"] == "cpu" and not t["moved"] for t in transfers)
    else:
        here = str(model.device)
        offloads = [t for t in transfers if t["direction"] == "offload"]
        assert offloads and all(t["src"] == here and t["dst"] == "cpu" and t["moved"] for t in offloads)


def test_load_puts_the_model_on_the_device_asked(tiny_llama_dir):
    model, tokenizer = kvlab.load(str(tiny_llama_dir), device="cpu")
    assert model.device == torch.device("cpu") and tokenizer("the cache").input_ids == [4, 5]
    model, _ = kvlab.load(str(tiny_llama_dir), device_map="cpu")  # transformers' device_map, through accelerate
    assert model.device == torch.device("cpu")
    with pytest.raises(ValueError, match="not both"):
        kvlab.load(str(tiny_llama_dir), device="cpu", device_map="auto")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match=r"device 'cuda' is not available here; valid here: cpu"):
            kvlab.load(str(tiny_llama_dir), device="cuda")
    with pytest.raises(ValueError, match="unknown device 'gpu'"):
        kvlab.load(str(tiny_llama_dir), device="gpu")


def test_parse_device_picks_the_accelerator_when_there_is_one():
    expected = "cuda" if torch.cuda.is_available() else "cpu"
    if expected == "cpu" and torch.backends.mps.is_available():
        expected = "mps"
    assert parse_device(None).type == expected
    assert parse_device("cpu") == torch.device("cpu") and parse_device(torch.device("cpu")) == torch.device("cpu")


def test_kvlab_run_device_option(tiny_llama_dir, capsys):
    from kvlab.cli import main

    args = [
        "run",
        "--model",
        str(tiny_llama_dir),
        "--cache",
        "dynamic",
        "--prompt",
        "the cache holds",
        "--max-new-tokens",
        "2",
        "--json",
    ]
    assert main(args + ["--device", "cpu"]) == 0
    import json

    assert {row["device"] for row in json.loads(capsys.readouterr().out)["layers"]} == {"cpu"}
    if not torch.cuda.is_available():
        assert main(args + ["--device", "cuda:1"]) == 2
        assert capsys.readouterr().err == ("kvlab run: error: device 'cuda:1' is not available here; valid here: cpu\n")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (none here)")
def test_on_a_gpu_run_and_offload_really_use_it(tiny):  # pragma: no cover - runs where a GPU is
    model = kvlab.tiny_model("tiny-llama", device="cuda")
    result = kvlab.run(model, None, torch.arange(3, 13).view(1, 10), cache="offloaded", max_new_tokens=3)
    assert {row["device"] for row in result.trace.layer_table()} <= {"cuda:0", "cpu"}
    moved = [t for t in result.trace.transfers if t["moved"]]
    assert moved and {t["src"] for t in moved if t["direction"] == "offload"} == {"cuda:0"}
