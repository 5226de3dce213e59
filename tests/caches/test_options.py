"""`kvlab.caches.options`: every rule about cache kinds and options, and every entry point calling it.

The first part follows the module, rule by rule. The second shows that each entry point (make_cache, kvlab.run,
kvlab.generate, the size calculator, the Cache Explorer's session, `kvlab run`, the bench) refuses
the same invalid option with the same message: the message `check_options` itself gives."""

from __future__ import annotations

import pytest
import transformers

import kvlab
from kvlab.bench.configs import BenchConfig
from kvlab.bench.support import unsupported_reason
from kvlab.caches import CacheOptionError, options
from kvlab.caches.options import check_options
from kvlab.cli import main
from kvlab.explorer.models import ByteTokenizer, ModelStore
from kvlab.explorer.session import RunRequest, Session
from kvlab.models.tiny import tiny_config
from kvlab.size import SIZE_KINDS, cache_size, from_config


# -- the rules, one by one --------------------------------------------------------------------------------------
def test_a_kind_is_one_of_the_kinds_the_caller_knows():
    assert options.check_cache_kind("static") == "static"
    with pytest.raises(CacheOptionError, match="unknown cache kind 'paged'; valid kinds: none, dynamic, static"):
        options.check_cache_kind("paged")
    with pytest.raises(CacheOptionError, match="unknown cache kind 'none'; valid kinds: dynamic, static"):
        options.check_cache_kind("none", SIZE_KINDS)  # the size calculator has no "none"


def test_each_kind_takes_its_own_options_and_static_kinds_need_a_length():
    assert options.check_option_names("static", {"max_cache_len": 8, "offload_only_non_sliding": None}) == {
        "max_cache_len": 8
    }
    with pytest.raises(CacheOptionError, match="cache kind 'dynamic' does not take nbits; it takes no options"):
        options.check_option_names("dynamic", {"nbits": 4})
    with pytest.raises(CacheOptionError, match="'static' does not take backend; it takes max_cache_len"):
        options.check_option_names("static", {"backend": "hqq", "max_cache_len": 8})
    with pytest.raises(CacheOptionError, match="offload_only_non_sliding must be True or False; got 'yes'"):
        options.check_option_names("offloaded", {"offload_only_non_sliding": "yes"})
    with pytest.raises(CacheOptionError, match=r"'offloaded_static' needs max_cache_len .*let generate size it"):
        options.check_option_names("offloaded_static", {})
    assert options.check_option_names("offloaded_static", {}, require_length=False) == {}


def test_static_length_holds_the_prompt_and_in_full_layers_the_new_tokens():
    options.check_static_length(None, 100)  # generate sizes it
    with pytest.raises(CacheOptionError, match="max_cache_len must be a positive integer; got 0"):
        options.check_static_length(0)
    with pytest.raises(
        CacheOptionError, match=r"max_cache_len=4 is below the prompt length \(5 tokens\); use at least 7"
    ):
        options.check_static_length(4, 5, 3)
    with pytest.raises(CacheOptionError, match=r"prompt \(5 tokens\) plus the 2 new tokens fed back .*at least 7"):
        options.check_static_length(6, 5, 3, ["sliding", "full"])
    options.check_static_length(7, 5, 3, ["full"])  # prompt + new - 1: the size generate picks is accepted
    options.check_static_length(5, 5, 1, ["full"])  # one new token is never fed back
    options.check_static_length(6, 5, 3, ["sliding", "sliding"])  # sliding layers keep a window: no rule
    options.check_static_length(6, 5, 3)  # layer kinds unknown: left to the call that knows them
    with pytest.raises(CacheOptionError, match="max_cache_len=6 cannot hold 7 tokens in the full-attention layers"):
        options.check_static_length(6, layer_kinds=["full"], tokens=7)


def test_quantized_backends_their_values_and_group_sizes():
    with pytest.raises(CacheOptionError, match="unknown quantization backend 'int4'; valid: hqq, quanto, fp8"):
        options.check_quantized_options("int4", None)
    with pytest.raises(CacheOptionError, match=r"unknown quantized cache options \['bits'\]"):
        options.check_quantized_options("hqq", None, bits=4)
    with pytest.raises(CacheOptionError, match="quanto nbits must be one of 2, 4; got 3"):
        options.check_quantized_options("quanto", None, nbits=3)
    with pytest.raises(CacheOptionError, match="hqq axis_key must be one of 0, 1; got -1"):
        options.check_quantized_options("hqq", None, axis_key=-1)
    with pytest.raises(CacheOptionError, match="the fp8 backend quantizes per tensor and takes none of"):
        options.check_quantized_options("fp8", None, nbits=4)
    with pytest.raises(CacheOptionError, match="q_group_size must be a positive integer; got -1"):
        options.check_quantized_options("quanto", None, q_group_size=-1)
    with pytest.raises(CacheOptionError, match="q_group_size must be a multiple of 2; got 7"):
        options.check_quantized_options("hqq", None, q_group_size=7)
    options.check_quantized_options("hqq", None, q_group_size=7, axis_key=1, axis_value=1)  # kvlab pads at axis 1
    config = tiny_config("tiny-llama")
    options.check_quantized_options("quanto", config, q_group_size=7)  # lengths unknown: left to run and generate
    with pytest.raises(CacheOptionError, match=r"at S=5 tokens \(the prompt\) .* which 7 does not divide"):
        options.check_quantized_options("quanto", config, prompt_tokens=5, q_group_size=7)
    assert options.quantized_lengths(5, 3) == [5, 8] and options.quantized_lengths(5, 3, cached_tokens=7) == [5]


def test_quantized_caches_take_full_attention_layers_only():
    options.check_quantized_layers(["full", "full"])
    with pytest.raises(CacheOptionError, match=r"its 3 layers are 2 sliding, 1 full \(sliding window 8\)"):
        options.check_quantized_layers(["sliding", "sliding", "full"], 8)


def test_offloading_needs_a_layer_to_offload():
    config = tiny_config("tiny-gemma3")
    options.check_offloading(config, True)  # it has full layers
    config.layer_types = ["sliding_attention"] * config.num_hidden_layers
    options.check_offloading(config, False)
    with pytest.raises(CacheOptionError, match="offloaded_static with offload_only_non_sliding=True offloads only"):
        options.check_offloading(config, True, "offloaded_static")


def test_past_recording_and_the_prompt():
    options.check_past_recording("offloaded", True)
    with pytest.raises(CacheOptionError, match="past recording is for dynamic and offloaded caches"):
        options.check_past_recording("static", True)
    options.check_prompt_length(None)
    with pytest.raises(ValueError, match=r"the prompt is empty \(0 tokens\)"):
        options.check_prompt_length(0)


def test_check_options_applies_every_rule_with_what_it_is_given():
    config = tiny_config("tiny-gemma3")  # 4 sliding layers (window 8), 2 full
    assert check_options("static", {"max_cache_len": 4, "offload_only_non_sliding": None}) == {"max_cache_len": 4}
    with pytest.raises(CacheOptionError, match="below the prompt length"):
        check_options("static", {"max_cache_len": 4}, prompt_tokens=5)
    with pytest.raises(CacheOptionError, match="cannot hold the prompt"):
        check_options("static", {"max_cache_len": 6}, config, prompt_tokens=5, max_new_tokens=3)
    # generate sizes a static cache at max(max_length - 1, max_cache_len): a minimum need not hold the prompt
    check_options("static", {"max_cache_len": 4}, config, prompt_tokens=5, max_new_tokens=3, length_is_minimum=True)
    with pytest.raises(CacheOptionError, match="cannot hold 9 tokens"):
        check_options("static", {"max_cache_len": 6}, layer_kinds=["full"], tokens=9)
    check_options("quantized", {"backend": "quanto"})  # the layer kinds are checked once they are known
    with pytest.raises(CacheOptionError, match="needs every layer to be full attention"):
        check_options("quantized", {"backend": "quanto"}, config)
    with pytest.raises(CacheOptionError, match="needs every layer to be full attention"):
        check_options("quantized", {}, layer_kinds=["sliding", "full"], sliding_window=8)
    with pytest.raises(CacheOptionError, match="for decoder-only models; this model is encoder-decoder"):
        check_options("quantized", {}, tiny_config("tiny-bart"))
    with pytest.raises(CacheOptionError, match="past recording is for"):
        check_options("static", {"max_cache_len": 8}, past_recording=True)
    with pytest.raises(ValueError, match="the prompt is empty"):
        check_options("dynamic", {}, prompt_tokens=0)
    # the most tokens a quantized cache holds: prompt + new - 1 (3 + 2 - 1 = 4 never reaches the first flush at 5)
    llama = tiny_config("tiny-llama")  # 2 kv heads x 8 head_dim = 16 values per token at axis 0
    check_options("quantized", {"q_group_size": 48, "residual_length": 2}, llama, prompt_tokens=3, max_new_tokens=2)
    with pytest.raises(CacheOptionError, match=r"S=5 tokens \(the first residual flush\)"):
        check_options("quantized", {"q_group_size": 48, "residual_length": 2}, llama, prompt_tokens=3, max_new_tokens=3)


# -- every entry point, the same rule and the same message -----------------------------------------------------
PROMPT = "the cache holds keys and values"
SAME = [
    ("tiny-llama", "dynamic", {"nbits": 4}),
    ("tiny-llama", "static", {"max_cache_len": 0}),
    ("tiny-llama", "static", {"max_cache_len": 3}),  # below the prompt's 6 tokens
    ("tiny-llama", "quantized", {"backend": "hqq", "q_group_size": 7}),
    ("tiny-gemma3", "quantized", {"backend": "quanto"}),  # sliding layers
]
FLAGS = {
    "nbits": "--nbits",
    "max_cache_len": "--max-cache-len",
    "backend": "--backend",
    "q_group_size": "--q-group-size",
}


def expected_message(config, kind: str, given: dict, prompt_tokens: int) -> str:
    """What the rule module itself says, given the model, the prompt and 3 new tokens."""
    with pytest.raises(CacheOptionError) as err:
        check_options(kind, given, config, prompt_tokens=prompt_tokens, max_new_tokens=3, require_length=False)
    return str(err.value)


@pytest.mark.parametrize("name,kind,given", SAME, ids=[f"{n}-{k}-{o}" for n, k, o in SAME])
def test_every_entry_point_refuses_with_the_same_message(tiny, name, kind, given):
    model = tiny(name)
    tokenizer = ByteTokenizer()
    ids = tokenizer(PROMPT, return_tensors="pt").input_ids[:, :6]  # (1, 6)
    message = expected_message(model.config, kind, given, ids.shape[-1])
    calls = {
        "kvlab.run": lambda: kvlab.run(model, None, ids, cache=kind, max_new_tokens=3, **given),
    }
    if given.get("max_cache_len") != 3:  # a length below the prompt is the model's business, not the cache's
        calls["make_cache"] = lambda: kvlab.make_cache(kind, model.config, **given)
        calls["cache_size"] = lambda: cache_size(from_config(model.config), kind, 8, prefill=6, **given)
    if kind != "dynamic" and given.get("max_cache_len") != 3:  # generate: a max_cache_len is only its minimum
        length = {"max_cache_len": given["max_cache_len"]} if "max_cache_len" in given else {}
        config = {k: v for k, v in given.items() if k != "max_cache_len"} or None
        calls["kvlab.generate"] = lambda: kvlab.generate(
            model, ids, cache_implementation=kind, cache_config=config, max_new_tokens=3, pad_token_id=0, **length
        )
    for entry, call in calls.items():
        with pytest.raises(CacheOptionError) as err:
            call()
        assert str(err.value) == message, entry
    session = Session(ModelStore(model, tokenizer))
    request = RunRequest("loaded", cache=kind, options=dict(given), prompt=PROMPT, prompt_tokens=6, max_new_tokens=3)
    with pytest.raises(CacheOptionError) as err:
        session.start(request)
    assert str(err.value) == message and session.current is None
    reason = unsupported_reason(model, BenchConfig("label", kind, dict(given)), ids.shape[-1], 3)
    assert reason.endswith(f"kvlab: {message}") or f"(kvlab: {message})" in reason


@pytest.mark.parametrize("kind,given", [(k, o) for n, k, o in SAME if n == "tiny-llama"])
def test_kvlab_run_on_the_command_line_says_the_same(tiny_llama_dir, capsys, kind, given):
    config = transformers.AutoConfig.from_pretrained(tiny_llama_dir)
    ids = transformers.AutoTokenizer.from_pretrained(tiny_llama_dir)(PROMPT, return_tensors="pt").input_ids
    message = expected_message(config, kind, given, ids.shape[-1])
    flags = [part for name, value in given.items() for part in (FLAGS[name], str(value))]
    args = ["run", "--model", str(tiny_llama_dir), "--cache", kind, *flags, "--prompt", PROMPT, "--max-new-tokens", "3"]
    assert main(args) == 2
    assert capsys.readouterr().err.strip() == f"kvlab run: error: {message}"


def test_the_rule_modules_import_without_torch():
    """`kvlab size`, `kvlab --help` and the explorer's first checks use the rules before any model exists."""
    import subprocess
    import sys

    code = (
        "import sys; from kvlab.caches import check_options, CacheCropError; import kvlab.caches.crop_rules; "
        "print(sorted({'torch', 'transformers'} & set(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]"


# -- requests: what no option fixes (check_request) -------------------------------------------------------------
MiB = 1 << 20
# tiny-llama: 3 layers x K,V x 2 kv heads x 16 head_dim x 4 bytes = 768 B per token; 512 positions
TOKEN_BYTES = 3 * 2 * 2 * 16 * 4


@pytest.fixture
def one_mib(monkeypatch):
    """The memory seam: every device has 1 MiB available; the devices asked about are recorded."""
    asked = []

    def available(device="cpu"):
        asked.append(str(device))
        return MiB

    monkeypatch.setattr(options, "available_memory", available)
    return asked


def test_available_memory_is_what_the_machine_reports():
    import psutil

    free = options.available_memory("cpu")
    assert isinstance(free, int) and 0 < free <= psutil.virtual_memory().total
    assert options.available_memory("meta") is None  # a device kvlab cannot read: nothing is refused


def test_files_to_write_are_checked_first(tmp_path):
    options.check_paths([None, tmp_path / "trace.json"])  # None: the option was not given
    with pytest.raises(options.RequestError, match=r"cannot write .*missing.*does not exist; nothing was run"):
        options.check_request(paths=[tmp_path / "missing" / "trace.json"])
    with pytest.raises(options.RequestError, match="it is a directory; name a file"):
        options.check_request(tiny_config("tiny-llama"), "dynamic", prompt_tokens=4, paths=[tmp_path])
    assert not list(tmp_path.iterdir())  # checking writes nothing


def test_a_static_cache_bigger_than_memory_is_refused_with_its_bytes(one_mib):
    config = tiny_config("tiny-llama")
    with pytest.raises(options.RequestError) as err:
        options.check_request(config, "static", {"max_cache_len": 10_000}, prompt_tokens=6, max_new_tokens=3)
    assert str(err.value) == (
        f"a static cache of 10,000 slots per layer needs 7.32 MiB ({10_000 * TOKEN_BYTES:,} B) and CPU memory has "
        f"1.00 MiB ({MiB:,} B) available; valid here: max_cache_len at most {MiB // TOKEN_BYTES:,}"
    )
    options.check_request(config, "static", {"max_cache_len": MiB // TOKEN_BYTES}, prompt_tokens=6, max_new_tokens=3)
    with pytest.raises(options.RequestError, match="1,366 slots per layer"):
        options.check_request(config, "static", {"max_cache_len": 1366}, prompt_tokens=6, max_new_tokens=3)
    # sized by generate (prompt + new - 1 slots): the new tokens that fit, capped by the model's 512 positions
    with pytest.raises(options.RequestError, match=r"100,000,008 slots .* at most 507 new tokens \(the model's 512"):
        options.check_request(config, "static", {}, prompt_tokens=6, max_new_tokens=100_000_003)
    with pytest.raises(options.RequestError, match=r"at most 1,360 new tokens$"):
        options.check_request(
            config, "static", {}, prompt_tokens=6, max_new_tokens=100_000_003, allow_past_positions=True
        )


def test_every_kind_is_checked_at_the_most_it_would_hold_where_it_would_live(one_mib):
    config = tiny_config("tiny-llama")
    many = {"prompt_tokens": 6, "max_new_tokens": 2_000, "allow_past_positions": True}
    with pytest.raises(options.RequestError, match=r"a dynamic cache of 2,005 tokens needs .*at most 1,360 new"):
        options.check_request(config, "dynamic", {}, **many)
    with pytest.raises(options.RequestError, match="an offloaded cache of 2,005 tokens .* CPU memory has"):
        options.check_request(config, "offloaded", {}, device="cuda:0", **many)
    assert one_mib[-1] == "cpu"  # an offloaded cache lives in CPU memory whatever the model's device
    with pytest.raises(options.RequestError, match="an offloaded_static cache"):
        options.check_request(config, "offloaded_static", {}, **many)
    with pytest.raises(options.RequestError, match="x batch 4 needs"):
        options.check_request(config, "dynamic", {}, prompt_tokens=6, max_new_tokens=400, batch=4)
    with pytest.raises(options.RequestError, match="cuda:0 memory has"):
        options.check_request(config, "static", {}, device="cuda:0", **many)
    with pytest.raises(options.RequestError, match="not even the prompt's cache fits"):
        options.check_request(config, "dynamic", {}, prompt_tokens=2_000, max_new_tokens=1, allow_past_positions=True)
    with pytest.raises(options.RequestError, match="a quantized cache"):
        options.check_request(config, "quantized", {"backend": "hqq"}, prompt_tokens=6, max_new_tokens=100_000)
    options.check_request(config, "none", {}, **many)  # no cache, nothing to hold
    options.check_request(config, "dynamic", {}, device=None, **many)  # spread over devices: not checked
    options.check_request(config, "dynamic", {}, dtype="int8", **many)  # a dtype the calculator cannot size
    options.check_request(config, "dynamic", {}, prompt_tokens=6, max_new_tokens=500)  # 505 x 768 B fits


def test_a_request_past_the_models_positions_is_refused_unless_allowed():
    config = tiny_config("tiny-llama")  # 512 positions (tests/test_model_facts.py reads them)
    options.check_request(config, "dynamic", prompt_tokens=500, max_new_tokens=13)  # positions 0..511
    with pytest.raises(options.RequestError) as err:
        options.check_request(config, "dynamic", prompt_tokens=500, max_new_tokens=14)
    assert str(err.value) == (
        "the prompt (500 tokens) plus 14 new tokens need 513 positions (the last new token is not fed back), past "
        "this model's 512 (max_position_embeddings); valid: at most 13 new tokens with this prompt, or "
        "allow_past_positions=True (kvlab run --allow-past-positions) to generate past them anyway"
    )
    with pytest.raises(options.RequestError, match="valid: a prompt of at most 512 tokens"):
        options.check_request(config, "none", prompt_tokens=600, max_new_tokens=3)
    options.check_request(config, "dynamic", prompt_tokens=600, max_new_tokens=3, allow_past_positions=True)
    options.check_request(tiny_config("tiny-mamba"), "dynamic", prompt_tokens=5_000, max_new_tokens=3)  # no limit
    bart = tiny_config("tiny-bart")  # 256 positions in the encoder and in the decoder
    with pytest.raises(options.RequestError, match=r"the prompt \(300 tokens\) is longer than this model's encoder"):
        options.check_request(bart, "dynamic", prompt_tokens=300, max_new_tokens=3)
    with pytest.raises(options.RequestError, match="257 new tokens need 257 decoder positions, past this model's 256"):
        options.check_request(bart, "dynamic", prompt_tokens=3, max_new_tokens=257)
    options.check_request(bart, "dynamic", prompt_tokens=256, max_new_tokens=256)


def request_message(config, **request) -> str:
    """What the rule module itself says about a request on tiny-llama."""
    with pytest.raises(options.RequestError) as err:
        options.check_request(config, **request)
    return str(err.value)


REFUSED = [
    ("static", {"max_cache_len": 10_000}, 6, 3),  # bigger than the 1 MiB available
    ("dynamic", {}, 600, 3),  # past the 512 positions
]


@pytest.mark.parametrize("kind,given,prompt,new", REFUSED, ids=["memory", "positions"])
def test_every_entry_point_refuses_the_request_before_generating(tiny, prompt_ids, one_mib, kind, given, prompt, new):
    model = tiny("tiny-llama")
    ids = prompt_ids(prompt)
    message = request_message(model.config, cache_kind=kind, options=given, prompt_tokens=prompt, max_new_tokens=new)
    calls = {
        "kvlab.run": lambda: kvlab.run(model, None, ids, cache=kind, max_new_tokens=new, **given),
        "kvlab.generate": lambda: kvlab.generate(
            model, ids, cache_implementation=kind, max_new_tokens=new, pad_token_id=0, **given
        ),
    }
    forwards = []
    hook = model.register_forward_pre_hook(lambda *args: forwards.append(1))
    try:
        for entry, call in calls.items():
            with pytest.raises(options.RequestError) as err:
                call()
            assert str(err.value) == message, entry
        session = Session(ModelStore(model, ByteTokenizer()))
        request = RunRequest(
            "loaded", cache=kind, options=dict(given), prompt="x", prompt_tokens=prompt, max_new_tokens=new
        )
        with pytest.raises(options.RequestError) as err:
            session.start(request)
        assert str(err.value) == message and session.current is None
    finally:
        hook.remove()
    assert forwards == []  # refused before the first forward: nothing generated, no cache allocated
