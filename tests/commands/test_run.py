"""`kvlab run`: an impossible request is refused in one line, exit status 2, before the weights load; a possible
one writes its report and trace atomically."""

from __future__ import annotations

import ast
import io
import json
import sys
from pathlib import Path

import pytest

import kvlab
import kvlab.models
from kvlab.cli import main
from kvlab.size import request_rules

PROMPT = "the cache holds keys and values"  # 6 tokens for the tiny-llama directory's word-level tokenizer


@pytest.fixture
def no_weights(monkeypatch):
    """Loading the weights fails the test: every refusal here must come before it."""

    def load(*args, **kwargs):
        raise AssertionError("the weights were loaded")

    monkeypatch.setattr(kvlab.models, "load", load)


def refused(capsys, argv: list[str]) -> str:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith("kvlab run: error: ") and err.count("\n") == 1 and "Traceback" not in err
    return err.strip()


def test_the_paged_kind_is_refused_with_where_it_runs(capsys, no_weights):
    err = refused(
        capsys, ["run", "--model", "smollm2", "--cache", "paged", "--prompt", "Hello", "--max-new-tokens", "4"]
    )
    assert "model.generate_batch(...) builds its paged cache" in err and "valid kinds here: none, dynamic" in err


def test_a_static_cache_bigger_than_memory_is_refused_before_the_weights_load(capsys, no_weights):
    """The issue's request on SmolLM2 (config and tokenizer only): 100,000,000 new tokens in a static cache, with
    the memory this machine really has (no machine has the 4 TiB it needs)."""
    argv = ["run", "--model", "smollm2", "--cache", "static", "--max-new-tokens", "100000000", "--prompt", "Hello"]
    err = refused(capsys, argv + ["--device", "cpu", "--no-chat-template"])
    slots = 1 + 100_000_000 - 1  # "Hello" (raw) is one token: generate sizes the cache at prompt + new tokens - 1
    needed = 30 * 2 * 3 * 64 * 4 * slots  # 30 layers x K,V x 3 kv heads x 64 x fp32 = 4.6 TB
    assert f"a static cache of {slots:,} slots per layer needs " in err and f"({needed:,} B) and CPU memory has" in err
    assert err.endswith("(the model's 8,192 positions allow no more)")


def test_the_memory_refusal_names_what_fits(tiny_llama_dir, capsys, no_weights, monkeypatch):
    monkeypatch.setattr(request_rules, "available_memory", lambda device="cpu": 1 << 20)
    base = ["run", "--model", str(tiny_llama_dir), "--prompt", PROMPT, "--device", "cpu"]
    err = refused(capsys, base + ["--cache", "static", "--max-cache-len", "10000", "--max-new-tokens", "3"])
    assert err == (
        "kvlab run: error: a static cache of 10,000 slots per layer needs 7.32 MiB (7,680,000 B) and CPU memory has "
        "1.00 MiB (1,048,576 B) available; valid here: max_cache_len at most 1,365"
    )
    err = refused(capsys, base + ["--cache", "dynamic", "--max-new-tokens", "5000", "--allow-past-positions"])
    assert "a dynamic cache of 5,005 tokens" in err and err.endswith("valid here: at most 1,360 new tokens")


def test_a_prompt_past_the_models_positions_is_refused_unless_allowed(tiny_llama_dir, capsys, monkeypatch):
    long_prompt = " ".join([PROMPT] * 100)  # 600 tokens; tiny-llama has 512 positions
    argv = ["run", "--model", str(tiny_llama_dir), "--cache", "dynamic", "--prompt", long_prompt, "--device", "cpu"]
    argv += ["--max-new-tokens", "3", "--json"]
    with monkeypatch.context() as patched:
        patched.setattr(kvlab.models, "load", lambda *a, **k: pytest.fail("the weights were loaded"))
        err = refused(capsys, argv)
    assert "the prompt (600 tokens) plus 3 new tokens need 602 positions" in err
    assert "past this model's 512 (max_position_embeddings); valid: a prompt of at most 512 tokens" in err
    assert main(argv + ["--allow-past-positions"]) == 0  # explicitly allowed: it generates
    data = json.loads(capsys.readouterr().out)
    assert data["prompt_tokens"] == 600 and 1 <= len(data["generated_token_ids"]) <= 3  # an end token may end it


@pytest.mark.parametrize("option", ["--trace", "--output"])
def test_an_unwritable_file_is_refused_before_anything_loads(tmp_path, capsys, monkeypatch, option):
    monkeypatch.setattr(kvlab.models, "load_config_and_tokenizer", lambda *a: pytest.fail("the config was read"))
    base = ["run", "--model", "smollm2", "--cache", "dynamic", "--prompt", "Hi", "--max-new-tokens", "2"]
    missing = tmp_path / "missing" / "out.json"
    err = refused(capsys, base + [option, str(missing)])
    assert (
        err
        == f"kvlab run: error: cannot write {missing}: the directory {missing.parent} does not exist; nothing was run"
    )
    assert "it is a directory; name a file" in refused(capsys, base + [option, str(tmp_path)])


def test_the_report_and_the_trace_are_written_whole(tiny_llama_dir, tmp_path, capsys):
    report, trace = tmp_path / "report.json", tmp_path / "trace.json"
    argv = ["run", "--model", str(tiny_llama_dir), "--cache", "static", "--max-cache-len", "16", "--device", "cpu"]
    argv += ["--prompt", PROMPT, "--max-new-tokens", "3", "--json", "--output", str(report), "--trace", str(trace)]
    assert main(argv) == 0
    data = json.loads(report.read_text())
    assert data["final_cache_bytes"] == 3 * 2 * 2 * 16 * 4 * 16  # 3 layers x K,V x 2 heads x 16 x fp32 x 16 slots
    saved = kvlab.Trace.load(trace)
    assert saved.summary()["final_bytes"] == data["final_cache_bytes"] and saved.meta["cache_kind"] == "static"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json", "trace.json"]  # no temporary file left


def test_a_run_that_stops_at_eos_says_why():
    from types import SimpleNamespace

    from kvlab.commands import run as run_command

    config = SimpleNamespace(eos_token_id=[2, 7])
    assert run_command.stop_reason([5, 7], 8, config) == "eos"  # fewer than asked, ended by an EOS id
    assert run_command.stop_reason([7], 8, config) == "eos"
    assert run_command.stop_reason([5, 6, 9], 3, config) == "max_new_tokens"
    assert run_command.stop_reason([5, 2], 2, SimpleNamespace(eos_token_id=2)) == "eos"
    assert run_command.stop_reason([5, 6], 2, SimpleNamespace(eos_token_id=None)) == "max_new_tokens"

    lines = []
    out = SimpleNamespace(print=lines.append)
    data = {
        "model": "smollm2",
        "cache": "dynamic",
        "options": {},
        "dtype": "float32",
        "generated_token_ids": [2],
        "prompt_tokens": 5,
        "seconds": 0.5,
        "tokens_per_s": 2.0,
        "text": "",
        "peak_cache_bytes": 1,
        "final_cache_bytes": 1,
        "slots_allocated": 1,
        "slots_live": 1,
        "slots_masked": 0,
        "waste_pct": 0,
        "tokens_evicted": 0,
        "stop_reason": "eos",
        "layers": [],
    }
    for template, advice in (("off", "drop --no-chat-template"), ("applied", "--no-chat-template gives it the prompt")):
        lines.clear()
        run_command.report(out, {**data, "chat_template": template})
        assert "-> 1 new token in" in lines[1]
        assert "end-of-sequence token after 1 new token" in lines[2] and advice in lines[2]
    lines.clear()
    run_command.report(out, {**data, "chat_template": "none", "stop_reason": "max_new_tokens"})
    assert lines[2] == "no text: the new token decodes to special tokens, which decoding skips"


# -- what a terminal sees, and what a pipe gets ---------------------------------------------------------------------
class Terminal(io.StringIO):
    """A stream that says it is a terminal, as a shell's stdout or stderr does."""

    def isatty(self) -> bool:
        return True


def tiny_run(tiny_llama_dir, *extra) -> list[str]:
    return ["run", "--model", str(tiny_llama_dir), "--cache", "dynamic", "--device", "cpu", "--max-new-tokens", "3"] + [
        *extra
    ]


def test_a_terminal_sees_the_text_as_it_comes_and_a_pipe_gets_the_report_alone(tiny_llama_dir, capsys, monkeypatch):
    assert main(tiny_run(tiny_llama_dir, "--prompt", PROMPT)) == 0  # both piped (captured): the report alone
    piped = capsys.readouterr()
    assert piped.out.startswith(f"{tiny_llama_dir} | cache dynamic") and "step" not in piped.err
    text = ast.literal_eval(next(line for line in piped.out.splitlines() if line.startswith("text: "))[6:])

    with monkeypatch.context() as patched:
        patched.setattr(sys, "stdout", Terminal())
        assert main(tiny_run(tiny_llama_dir, "--prompt", PROMPT)) == 0
        shown = sys.stdout.getvalue()
    untimed = [line for line in shown.splitlines() if not line.startswith("prompt ")]
    # transformers' TextStreamer printed the same text first, then came the report (its timing line aside)
    assert untimed == [text] + [line for line in piped.out.splitlines() if not line.startswith("prompt ")]


def test_a_terminal_on_stderr_counts_the_steps_and_the_json_stays_clean(tiny_llama_dir, capsys, monkeypatch):
    monkeypatch.setattr(sys, "stderr", Terminal())
    assert main(tiny_run(tiny_llama_dir, "--prompt", PROMPT, "--json")) == 0
    data = json.loads(capsys.readouterr().out)  # stdout: the JSON object alone
    shown, new = sys.stderr.getvalue(), len(data["generated_token_ids"])
    assert shown.startswith("\r\033[Kkvlab run: prefill of 6 tokens…") and f"kvlab run: step {new}/3" in shown
    assert shown.endswith("\r\033[K")  # the line is erased at the end


def test_the_chat_template_is_used_by_default_and_can_be_turned_off(tiny_llama_dir, tmp_path, capsys):
    import shutil

    from transformers import AutoTokenizer

    chat_dir = tmp_path / "tiny-chat"
    shutil.copytree(tiny_llama_dir, chat_dir)
    tokenizer = AutoTokenizer.from_pretrained(chat_dir)
    tokenizer.chat_template = "{% for m in messages %}{{ m['content'] }} {% endfor %}{{ 'hello' }}"
    tokenizer.save_pretrained(chat_dir)
    runs = {}
    for name, model_dir, flags in (
        ("template", chat_dir, []),
        ("raw", chat_dir, ["--no-chat-template"]),
        ("no template", tiny_llama_dir, []),
    ):
        assert main(tiny_run(model_dir, "--prompt", PROMPT, "--json", *flags)) == 0
        runs[name] = json.loads(capsys.readouterr().out)
    assert (runs["template"]["prompt_tokens"], runs["template"]["chat_template"]) == (7, "applied")  # + "hello"
    assert (runs["raw"]["prompt_tokens"], runs["raw"]["chat_template"]) == (6, "off")
    assert (runs["no template"]["prompt_tokens"], runs["no template"]["chat_template"]) == (6, "none")
    assert "the prompt is empty" in refused(capsys, tiny_run(chat_dir, "--prompt", ""))
    assert refused(capsys, tiny_run(tiny_llama_dir, "--prompt", PROMPT, "--chat")).endswith(
        "--chat: this model's tokenizer has no chat template; run without --chat"
    )


def test_the_help_says_the_chat_template_is_the_default(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--help"])
    assert "default: wrapped when the model's tokenizer has a chat template" in " ".join(
        capsys.readouterr().out.split()
    )


def test_a_quanto_run_builds_the_extension_once_and_outside_its_timing(
    tiny_llama_dir, unbuilt_quanto, capsys, monkeypatch
):
    """A fresh machine, faked by the probe: the one-line notice comes once, before the run's clock starts."""
    from kvlab import recorded_run

    events = unbuilt_quanto  # the probe records the extension it found unbuilt; the clock follows

    class Clock(recorded_run.Stopwatch):
        def __enter__(self):
            events.append("clock starts")
            return super().__enter__()

    monkeypatch.setattr(recorded_run, "Stopwatch", Clock)
    quanto = ["--cache", "quantized", "--backend", "quanto", "--q-group-size", "16"]
    for _ in range(2):
        assert main(tiny_run(tiny_llama_dir, "--prompt", PROMPT, "--json", *quanto)) == 0
    assert capsys.readouterr().err.count("kvlab: building optimum-quanto's C++ extension once") == 1
    assert events == ["quanto_cpp", "clock starts", "clock starts"]


STRATEGY = str(Path(__file__).parent.parent / "strategies" / "keep_ends.py")


def test_a_strategy_file_runs_beside_the_kinds(tiny_llama_dir, tmp_path, capsys):
    report, trace = tmp_path / "report.json", tmp_path / "trace.json"
    argv = ["run", "--model", str(tiny_llama_dir), "--cache", f"{STRATEGY}:KeepEnds", "--device", "cpu"]
    argv += ["--prompt", PROMPT, "--max-new-tokens", "4", "--json", "--output", str(report), "--trace", str(trace)]
    assert main(argv) == 0
    data, saved = json.loads(report.read_text()), kvlab.Trace.load(trace)
    assert data["cache"] == saved.meta["cache_kind"] == "KeepEnds" and saved.meta["strategy"]["file"] == STRATEGY
    last = saved.final_layers()[0]
    seen = data["prompt_tokens"] + 3  # the last new token is not fed back
    assert (last["logical_length"], last["slots_allocated"], last["tokens_evicted"]) == (seen, 6, seen - 6)


@pytest.mark.parametrize(
    ("cache", "message"),
    [
        ("nowhere.py:KeepEnds", "strategy file nowhere.py does not exist"),
        (f"{STRATEGY}:Missing", "keep_ends.py has no class 'Missing'; its layer classes: KeepEnds"),
        (f"{STRATEGY}:NotALayer", "NotALayer is not a transformers cache layer class"),
    ],
)
def test_a_strategy_that_cannot_be_loaded_is_one_line_before_the_weights(capsys, no_weights, cache, message):
    err = refused(capsys, ["run", "--model", "smollm2", "--cache", cache, "--prompt", "Hi", "--max-new-tokens", "2"])
    assert message in err


def test_a_cache_that_is_neither_a_kind_nor_a_file_names_both(capsys):
    with pytest.raises(SystemExit):
        main(["run", "--model", "smollm2", "--cache", "sinks", "--prompt", "Hi", "--max-new-tokens", "2"])
    assert "invalid cache 'sinks'; valid: none, dynamic, static" in capsys.readouterr().err


def test_a_strategy_that_fails_mid_generation_is_one_line_naming_it(tiny_llama_dir, tmp_path, capsys):
    mine = tmp_path / "mine.py"
    mine.write_text(
        "from transformers.cache_utils import DynamicLayer\n\n\n"
        "class Halves(DynamicLayer):\n"
        "    def update(self, key_states, value_states, *args, **kwargs):\n"
        "        keys, values = super().update(key_states, value_states)\n"
        "        return keys.half(), values.half()\n"
    )
    argv = ["run", "--model", str(tiny_llama_dir), "--cache", f"{mine}:Halves", "--prompt", PROMPT]
    err = refused(capsys, [*argv, "--max-new-tokens", "2", "--device", "cpu"])
    assert "Halves.update returned keys of (1, 2, 6, 16) float16 on cpu for new states of (1, 2, 6, 16) float32" in err


def test_a_model_that_never_fills_its_cache_says_so_and_writes_no_trace(tiny_llama_dir, tmp_path, capsys):
    import shutil

    gpt_dir = tmp_path / "tiny-gpt1"  # GPT-1: generate hands it a Cache its forward never updates
    shutil.copytree(tiny_llama_dir, gpt_dir)
    for weights in gpt_dir.glob("*.safetensors"):
        weights.unlink()
    kvlab.tiny_model("openai-gpt").save_pretrained(gpt_dir)
    trace = tmp_path / "trace.json"
    assert main(tiny_run(gpt_dir, "--prompt", PROMPT, "--json", "--trace", str(trace))) == 0
    captured = capsys.readouterr()
    lines = [line for line in captured.err.splitlines() if "no transformers Cache" in line]
    assert len(lines) == 1 and "openai-gpt generated 3 tokens" in lines[0], captured.err
    assert not trace.exists()
    assert json.loads(captured.out)["generated_token_ids"]  # the tokens are still reported
    assert main(tiny_run(tiny_llama_dir, "--prompt", PROMPT, "--json", "--trace", str(trace))) == 0
    assert "no transformers Cache" not in capsys.readouterr().err and trace.exists()  # a model that caches: traced
