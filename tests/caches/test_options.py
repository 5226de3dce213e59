"""`kvlab.caches.options`: every rule about cache kinds and options, and every entry point calling it.

The first part follows the module, rule by rule. The second shows that each entry point (make_cache, kvlab.run,
kvlab.generate, the size calculator, the Cache Explorer's session, `kvlab run`, the bench) refuses
the same invalid option with the same message: the message `check_options` itself gives."""

from __future__ import annotations

from dataclasses import replace

import pytest
import transformers

import kvlab
from kvlab.bench.configs import BenchConfig
from kvlab.bench.runner import unsupported_reason
from kvlab.cache_kinds import PAGE_SIZES, PAGED_DEFAULTS
from kvlab.caches import CacheOptionError, options
from kvlab.caches.options import check_options
from kvlab.cli import main
from kvlab.explorer.models import ByteTokenizer, ModelStore
from kvlab.explorer.session import RunRequest, Session
from kvlab.model_facts import model_facts
from kvlab.models.tiny import tiny_config
from kvlab.request import Request
from kvlab.size import SIZE_KINDS, cache_size, from_config


# -- the rules, one by one --------------------------------------------------------------------------------------
def test_a_kind_is_one_of_the_kinds_the_caller_knows():
    assert options.check_cache_kind("static") == "static"
    with pytest.raises(CacheOptionError, match="unknown cache kind 'pages'; valid kinds: none, dynamic, static"):
        options.check_cache_kind("pages")
    with pytest.raises(CacheOptionError, match="unknown cache kind 'none'; valid kinds: dynamic, static"):
        options.check_cache_kind("none", SIZE_KINDS)  # the size calculator has no "none"


def test_the_paged_kind_is_refused_where_generate_builds_the_cache_naming_generate_batch(tiny):
    pattern = r"cache kind 'paged' is continuous batching: model.generate_batch\(...\) builds .*; valid kinds here: "
    for kinds in (options.CACHE_KINDS, SIZE_KINDS):
        with pytest.raises(CacheOptionError, match=pattern) as err:
            options.check_cache_kind("paged", kinds)
        assert "\n" not in str(err.value) and str(err.value).endswith(", ".join(kinds))
    with pytest.raises(CacheOptionError, match=pattern):
        check_options("paged", {"page_size": 16})
    model = tiny("tiny-llama")
    with pytest.raises(CacheOptionError, match=pattern):
        kvlab.make_cache("paged", model.config)
    with pytest.raises(CacheOptionError, match=pattern):
        kvlab.run(model, None, ByteTokenizer()(PROMPT).input_ids, cache="paged", max_new_tokens=2)


def test_the_paged_options_their_values_and_the_pool():
    assert options.check_paged_options({}, 8) == PAGED_DEFAULTS
    assert options.check_paged_options({"page_size": 4, "num_blocks": None}, 8)["num_blocks"] == 0
    with pytest.raises(
        CacheOptionError, match="cache kind 'paged' does not take backend; it takes page_size, requests"
    ):
        options.check_paged_options({"backend": "hqq"}, 8)
    sizes = ", ".join(map(str, PAGE_SIZES))
    with pytest.raises(CacheOptionError, match=f"page_size must be one of {sizes}; got 5"):
        options.check_paged_options({"page_size": 5}, 8)
    with pytest.raises(CacheOptionError, match="requests must be between 1 and 8; got 9"):
        options.check_paged_options({"requests": 9}, 8)  # the most the workload (kvlab.serving) holds
    with pytest.raises(CacheOptionError, match=r"num_blocks must be 0 \(room for every request\) .* got -1"):
        options.check_paged_options({"num_blocks": -1}, 8)
    assert options.check_page_size(5) == 5  # `kvlab size` takes any page size ...
    with pytest.raises(CacheOptionError, match="page_size must be a positive integer; got 0"):
        options.check_page_size(0)  # ... that is one
    assert [options.paged_blocks(n, 16) for n in (1, 16, 17, 32)] == [1, 1, 2, 2]
    with pytest.raises(ValueError, match="block_size must be >= 1"):
        options.paged_blocks(3, 0)
    # requests of 5 and 30 prompt tokens, 2 new tokens each, in blocks of 4: 2 and 8 blocks at their final length
    assert options.pool_blocks([5, 30], 2, 4, num_blocks=0) == 10 and options.pool_blocks([5, 30], 2, 4, 8) == 8
    with pytest.raises(CacheOptionError, match=r"num_blocks=7 is too small: the largest request \(32 tokens"):
        options.pool_blocks([5, 30], 2, 4, 7)


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
    config = model_facts(tiny_config("tiny-llama"))
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
    options.check_offloading(model_facts(config), True)  # it has full layers
    config.layer_types = ["sliding_attention"] * config.num_hidden_layers
    options.check_offloading(model_facts(config), False)
    with pytest.raises(CacheOptionError, match="offloaded_static with offload_only_non_sliding=True offloads only"):
        options.check_offloading(model_facts(config), True, "offloaded_static")


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
        check_options("static", {"max_cache_len": 4}, request=Request(prompt_tokens=5))
    with pytest.raises(CacheOptionError, match="cannot hold the prompt"):
        check_options("static", {"max_cache_len": 6}, config, request=Request(prompt_tokens=5, new_tokens=3))
    # generate sizes a static cache at max(max_length - 1, max_cache_len): a minimum need not hold the prompt
    check_options(
        "static", {"max_cache_len": 4}, config, request=Request(prompt_tokens=5, new_tokens=3, length_is_minimum=True)
    )
    with pytest.raises(CacheOptionError, match="cannot hold 9 tokens"):
        check_options("static", {"max_cache_len": 6}, model_facts(tiny_config("tiny-llama")), tokens=9)
    check_options("quantized", {"backend": "quanto"})  # the layer kinds are checked once they are known
    with pytest.raises(CacheOptionError, match="needs every layer to be full attention"):
        check_options("quantized", {"backend": "quanto"}, config)
    with pytest.raises(CacheOptionError, match="needs every layer to be full attention"):
        # facts without a config (a known architecture's, shipped): the layer kinds alone
        facts = replace(model_facts(tiny_config("tiny-llama")), layer_kinds=("sliding", "full"), sliding_window=8)
        check_options("quantized", {}, facts)
    with pytest.raises(CacheOptionError, match="for decoder-only models; this model is encoder-decoder"):
        check_options("quantized", {}, tiny_config("tiny-bart"))
    with pytest.raises(CacheOptionError, match="past recording is for"):
        check_options("static", {"max_cache_len": 8}, request=Request(past_recording=True))
    with pytest.raises(ValueError, match="the prompt is empty"):
        check_options("dynamic", {}, request=Request(prompt_tokens=0))
    # the most tokens a quantized cache holds: prompt + new - 1 (3 + 2 - 1 = 4 never reaches the first flush at 5)
    llama = tiny_config("tiny-llama")  # 2 kv heads x 8 head_dim = 16 values per token at axis 0
    check_options(
        "quantized", {"q_group_size": 48, "residual_length": 2}, llama, request=Request(prompt_tokens=3, new_tokens=2)
    )
    with pytest.raises(CacheOptionError, match=r"S=5 tokens \(the first residual flush\)"):
        check_options(
            "quantized",
            {"q_group_size": 48, "residual_length": 2},
            llama,
            request=Request(prompt_tokens=3, new_tokens=3),
        )


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
        check_options(
            kind, given, config, request=Request(prompt_tokens=prompt_tokens, new_tokens=3, generate_sizes=True)
        )
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
