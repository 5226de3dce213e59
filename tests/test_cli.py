"""The `kvlab` command line: invalid input fails fast with one clear line; a real run reports exact numbers."""

import json
import subprocess
import sys

import pytest

from kvlab.cli import main

BAD_INPUT = [
    (["--cache", "quantized", "--backend", "quanto", "--nbits", "3"], "quanto nbits must be one of 2, 4"),
    (["--cache", "quantized", "--backend", "hqq", "--nbits", "5"], "hqq nbits must be one of 1, 2, 3, 4, 8"),
    (["--cache", "quantized", "--backend", "fp8", "--nbits", "4"], "fp8 backend quantizes per tensor"),
    (["--cache", "quantized", "--backend", "fp8", "--residual-length", "4"], "fp8 backend quantizes per tensor"),
    (["--cache", "dynamic", "--nbits", "4"], "'dynamic' does not take nbits"),
    (["--cache", "static", "--max-cache-len", "4"], "max_cache_len=4 is below the prompt length"),
    (["--cache", "static", "--max-cache-len", "12"], "cannot hold the prompt"),
    (
        ["--cache", "dynamic", "--prompt-file", "/nonexistent/prompt.txt"],
        "prompt file /nonexistent/prompt.txt does not exist",
    ),
    (["--model", "llama-9000", "--cache", "dynamic"], "bundled models: smollm2, gemma3"),
    (["--model", "gemma3", "--cache", "quantized", "--backend", "quanto"], "15 sliding, 3 full"),
]


@pytest.mark.parametrize("args, message", BAD_INPUT, ids=[m[:30] for _, m in BAD_INPUT])
def test_bad_input_exits_2_with_one_line_naming_what_is_valid(capsys, args, message):
    base = ["run", "--max-new-tokens", "4", "--no-chat-template"]  # the prompt as is: its token count is the point
    if "--model" not in args:
        base += ["--model", "smollm2"]
    if "--prompt-file" not in args:
        base += ["--prompt", "A prompt of about ten tokens, give or take."]
    assert main(base + args) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and err.startswith("kvlab run: error:") and "Traceback" not in err
    assert len(err.splitlines()) == 1


def test_models_list(capsys):
    assert main(["models", "list"]) == 0
    out = capsys.readouterr().out
    assert "smollm2" in out and "gemma3" in out and "prepared" in out


def test_run_json_through_the_installed_command(tmp_path):
    trace_path = tmp_path / "trace.json"
    cmd = [
        sys.executable,
        "-m",
        "kvlab.cli",
        "run",
        "--model",
        "smollm2",
        "--cache",
        "static",
        "--max-cache-len",
        "32",
        "--prompt",
        "The cache holds",
        "--no-chat-template",
        "--max-new-tokens",
        "5",
        "--json",
        "--trace",
        str(trace_path),
    ]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    required = {
        "model",
        "cache",
        "options",
        "dtype",
        "prompt_tokens",
        "generated_token_ids",
        "text",
        "tokens_per_s",
        "peak_cache_bytes",
        "final_cache_bytes",
        "slots_allocated",
        "slots_live",
        "slots_masked",
        "layers",
    }
    assert required <= set(data)
    live = data["prompt_tokens"] + 5 - 1
    assert (data["slots_allocated"], data["slots_live"], data["slots_masked"]) == (30 * 32, 30 * live, 30 * (32 - live))
    assert data["final_cache_bytes"] == 2 * 30 * 3 * 64 * 32 * 4 and len(data["layers"]) == 30
    assert len(data["generated_token_ids"]) == 5 and data["options"] == {"max_cache_len": 32}
    from kvlab import Trace

    assert Trace.load(trace_path).summary()["final_bytes"] == data["final_cache_bytes"]
