"""The quantized cache: hqq lengths that do not pack, crops, refusals, and exact packed + residual bytes."""

import pytest
import torch
from transformers.cache_utils import HQQQuantizedLayer

from kvlab import _compat, make_cache
from kvlab.caches import CacheCropError, CacheOptionError, PaddedHQQQuantizedLayer
from kvlab.caches.quantized import hqq_needs_flatten, hqq_sequence_padding
from kvlab.quantized_backends import BACKENDS_BY_NAME
from kvlab.recording.storage import storage_bytes

HQQ_NBITS = BACKENDS_BY_NAME["hqq"].nbits


def _states(seq, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(1, 3, seq, 64, generator=g), torch.randn(1, 3, seq, 64, generator=g)


@pytest.mark.parametrize("nbits", HQQ_NBITS)
@pytest.mark.parametrize("axis", [0, 1])
def test_every_length_quantizes_and_equals_transformers_where_it_works(nbits, axis):
    for seq in range(1, 13):
        ours = PaddedHQQQuantizedLayer(nbits=nbits, axis_key=axis, axis_value=axis, residual_length=128)
        theirs = HQQQuantizedLayer(nbits=nbits, axis_key=axis, axis_value=axis, residual_length=128)
        keys, values = _states(seq)
        ours.update(keys, values)
        got = ours._dequantize(ours._quantized_keys)
        assert got.shape == keys.shape
        assert (got - keys).abs().mean() < (keys.abs().mean() if nbits > 1 else 2 * keys.abs().mean())
        if hqq_sequence_padding(tuple(keys.shape), 64, nbits, axis) == 0 and not hqq_needs_flatten(nbits, axis):
            theirs.update(keys, values)
            assert torch.equal(got, theirs._dequantize(theirs._quantized_keys))


def test_padding_is_the_smallest_that_packs():
    # (1, 3, seq, 64) at axis 1 has 3 * seq rows: 4 bits need an even count, 2 bits a multiple of 4
    assert [hqq_sequence_padding((1, 3, s, 64), 64, 4, 1) for s in (5, 6, 7)] == [1, 0, 1]
    assert [hqq_sequence_padding((1, 3, s, 64), 64, 2, 1) for s in (5, 6, 8)] == [3, 2, 0]
    assert hqq_sequence_padding((1, 3, 5, 64), 64, 4, 0) == 0
    assert hqq_sequence_padding((1, 2, 17, 16), 64, 4, 0) == 1  # the element count must divide by the group


def test_generation_at_4_bits_on_an_odd_prompt_runs(tiny, prompt_ids):
    model = tiny("tiny-llama")
    cache = make_cache(
        "quantized", model.config, backend="hqq", nbits=4, axis_key=1, axis_value=1, q_group_size=16, residual_length=4
    )
    out = model.generate(
        prompt_ids(5),
        **{_compat.CACHE_KWARG: cache},
        max_new_tokens=9,
        min_new_tokens=9,
        do_sample=False,
        pad_token_id=0,
    )
    assert out.shape[1] == 14 and cache.trace.flushes


def test_bytes_are_packed_plus_residual_exactly(tiny, prompt_ids):
    model = tiny("tiny-llama")  # 2 kv heads x 16
    for options in (
        {"backend": "quanto", "nbits": 2, "q_group_size": 16},
        {"backend": "hqq", "nbits": 4},
        {"backend": "fp8"},
    ):
        cache = make_cache(
            "quantized", model.config, **({"residual_length": 5} if options["backend"] != "fp8" else {}), **options
        )
        model.generate(
            prompt_ids(12),
            **{_compat.CACHE_KWARG: cache},
            max_new_tokens=7,
            min_new_tokens=7,
            do_sample=False,
            pad_token_id=0,
        )
        for row, layer in zip(cache.trace.layer_table(), cache.layers):
            packed = storage_bytes(layer._quantized_keys, layer._quantized_values)
            residual = storage_bytes(layer.keys, layer.values)
            assert (row["packed_bytes"], row["residual_bytes"], row["bytes_held"]) == (
                packed,
                residual,
                packed + residual,
            )
            assert row["quantized_tokens"] + row["residual_tokens"] == row["logical_length"] == 18
        if options["backend"] == "quanto":  # 2 bits per value + a float32 scale and shift per group of 16
            values = 2 * 1 * 2 * (18 - cache.layers[0].keys.shape[-2]) * 16
            groups = values // 16
            assert cache.trace.layer_table()[0]["packed_bytes"] >= values * 2 // 8 + groups * 4


def test_crop_within_the_residual_keeps_the_length_consistent(tiny, prompt_ids):
    model = tiny("tiny-llama")
    cache = make_cache("quantized", model.config, backend="quanto", nbits=4, residual_length=8)
    model(prompt_ids(12), **{_compat.CACHE_KWARG: cache})  # 12 tokens quantized, residual empty
    model(prompt_ids(3, seed=1), **{_compat.CACHE_KWARG: cache})  # 3 tokens in the residual
    assert cache.get_seq_length() == 15
    cache.crop(-2)
    assert cache.get_seq_length() == 13 and cache.layers[0].keys.shape[-2] == 1
    with pytest.raises(CacheCropError, match="only 1 tokens in its full-precision residual"):
        cache.crop(-2)
    assert cache.get_seq_length() == 13


def test_refusals_name_what_is_valid(tiny, gemma3_config):
    llama = tiny("tiny-llama").config
    cases = [
        ({"backend": "quanto", "nbits": 3}, "quanto nbits must be one of 2, 4"),
        ({"backend": "hqq", "nbits": 5}, "hqq nbits must be one of 1, 2, 3, 4, 8"),
        ({"backend": "hqq", "axis_key": -1}, "hqq axis_key must be one of 0, 1"),
        ({"backend": "fp8", "nbits": 4}, "fp8 backend quantizes per tensor and takes none of"),
        ({"backend": "int3"}, "valid: hqq, quanto, fp8"),
    ]
    for options, message in cases:
        with pytest.raises(CacheOptionError, match=message):
            make_cache("quantized", llama, **options)
    with pytest.raises(CacheOptionError, match=r"12 sliding, 2 full|15 sliding, 3 full"):
        make_cache("quantized", gemma3_config, backend="quanto")


@pytest.fixture
def gemma3_config():
    import transformers

    return transformers.Gemma3TextConfig(num_hidden_layers=18, sliding_window=512)


# -- optimum-quanto's C++ extension: built once, announced in one line, before any clock starts ----------------------
NOTICE = "kvlab: building optimum-quanto's C++ extension once (about 1 minute)…"


def test_the_extension_probe_reads_quantos_build_directory(tmp_path):
    from types import SimpleNamespace

    from torch.utils.cpp_extension import LIB_EXT

    from kvlab.caches.quantized import _extension_built, _quanto_extension

    assert _quanto_extension("meta") is None  # no extension for that device type: nothing to build
    fake = SimpleNamespace(name="quanto_cpp", build_directory=str(tmp_path))
    assert not _extension_built(fake)  # an empty build directory
    (tmp_path / f"quanto_cpp{LIB_EXT}").write_bytes(b"")
    (tmp_path / "pytorch_version.txt").write_text("1.0.0")
    assert not _extension_built(fake)  # built for another torch: quanto deletes it and compiles again
    (tmp_path / "pytorch_version.txt").write_text(torch.__version__)
    assert _extension_built(fake)


def test_a_watched_quanto_cache_builds_the_extension_once_before_its_first_step(
    tiny, prompt_ids, unbuilt_quanto, capsys, monkeypatch
):
    from transformers import QuantizedCache

    import kvlab
    from kvlab.caches import quantized
    from kvlab.recording.recorder import now

    real, ready_at = quantized.ensure_quanto_extension, []
    monkeypatch.setattr(quantized, "ensure_quanto_extension", lambda device: (real(device), ready_at.append(now())))
    model = tiny("tiny-llama")
    assert quantized.quanto_extension_pending("cpu") and unbuilt_quanto == ["quanto_cpp"]  # what a status can say
    traces = []
    for _ in range(2):
        cache = QuantizedCache("quanto", model.config, nbits=4, q_group_size=16, residual_length=4)
        with kvlab.watch(model) as watch:
            model.generate(
                prompt_ids(8), **{_compat.CACHE_KWARG: cache}, max_new_tokens=3, do_sample=False, pad_token_id=0
            )
        traces.append(watch.trace)
    assert capsys.readouterr().err.count(NOTICE) == 1 and len(unbuilt_quanto) == 2 and len(ready_at) == 1
    assert not quantized.quanto_extension_pending("cpu")  # built and loaded: the probe is not asked again
    assert traces[0].meta["step_started_s"][0] >= ready_at[0]  # the first recorded step starts after the build


def test_the_extension_is_built_once_whatever_ninja_the_callers_path_finds_first():
    """Two processes of the same interpreter, one with its environment's tools first on PATH and one with only the
    system's (where another ninja may live): the library quanto built is loaded by both, never compiled again."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    from torch.utils.cpp_extension import LIB_EXT

    from kvlab.caches.quantized import _quanto_extension, ensure_quanto_extension

    ensure_quanto_extension("cpu")  # built by `make extensions`; a fresh machine builds it here, once
    library = Path(_quanto_extension("cpu").build_directory) / f"quanto_cpp{LIB_EXT}"
    built = library.stat().st_mtime_ns
    check = "from kvlab.caches.quantized import ensure_quanto_extension; ensure_quanto_extension('cpu')"
    own_tools = str(Path(sys.executable).parent)
    for path in ("/usr/local/bin:/usr/bin:/bin", own_tools + os.pathsep + "/usr/bin:/bin"):
        done = subprocess.run(
            [sys.executable, "-c", check], env={**os.environ, "PATH": path}, capture_output=True, text=True
        )
        assert done.returncode == 0, done.stderr
        assert "building optimum-quanto" not in done.stderr
    assert library.stat().st_mtime_ns == built  # the same file: nothing was compiled again


def test_a_load_that_turns_into_a_build_is_announced_while_it_runs(monkeypatch):
    """The probe finds the library built, but loading it compiles (another ninja built it last): the notice
    comes from the late timer, and the load here only finishes once it has been printed."""
    import io
    import sys
    import threading

    from kvlab.caches import quantized

    printed = threading.Event()

    class Stderr(io.StringIO):
        def write(self, text):
            if "building optimum-quanto" in text:
                printed.set()
            return super().write(text)

    class Rebuilding:
        name, build_directory = "quanto_cpp", "unused"

        @property
        def lib(self):
            assert printed.wait(timeout=60)  # the notice, printed while the "build" runs
            return object()

    monkeypatch.setattr(sys, "stderr", Stderr())
    monkeypatch.setattr(quantized, "_quanto_ready", set())
    monkeypatch.setattr(quantized, "_quanto_extension", lambda device_type: Rebuilding())
    monkeypatch.setattr(quantized, "_extension_built", lambda extension: True)
    monkeypatch.setattr(quantized, "QUANTO_LOAD_SECONDS", 0.0)
    quantized.ensure_quanto_extension("cpu")
    assert sys.stderr.getvalue().count(NOTICE) == 1 and not quantized.quanto_extension_pending("cpu")
