"""The README's strategy, tried as a new user would: its class block saved in a fresh file as it is, then run through
`kvlab run` and `kvlab bench` by `FILE.py:ClassName`, its tokens those of plain transformers with the same class."""

from __future__ import annotations

import json
import re
from pathlib import Path

from transformers import Cache

import kvlab
from kvlab.cli import main
from kvlab.strategies import load_strategy

README = Path(__file__).resolve().parent.parent.parent / "README.md"
PROMPT = "the cache holds keys and values"  # 6 words of the tiny-llama directory's tokenizer (+ <s>)


def readme_strategy() -> str:
    """The first Python block of the README's "Write your own strategy" section."""
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## Write your own strategy") :]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


def test_the_readme_strategy_is_short_and_runs_from_a_fresh_file(tiny_llama_dir, tmp_path, capsys):
    code = readme_strategy()
    assert "class KeepEnds(DynamicLayer)" in code and len(code.splitlines()) <= 40
    (tmp_path / "keep_ends.py").write_text(code)
    spec = f"{tmp_path / 'keep_ends.py'}:KeepEnds"
    argv = ["run", "--model", str(tiny_llama_dir), "--cache", spec, "--device", "cpu", "--prompt", PROMPT]
    assert main([*argv, "--max-new-tokens", "20", "--json", "--trace", str(tmp_path / "t.json")]) == 0
    data = json.loads(capsys.readouterr().out)
    seen = data["prompt_tokens"] + 19  # the last new token is not fed back
    trace = kvlab.Trace.load(tmp_path / "t.json")
    assert data["cache"] == "KeepEnds" and trace.final_layers()[0]["slots_allocated"] == 16  # 4 first + 12 last
    assert data["tokens_evicted"] == 3 * (seen - 16)  # over tiny-llama's 3 layers
    assert [e["bytes_held"] for e in trace.updates[-3:]] == [16 * 2 * 2 * 16 * 4] * 3  # K, V x 2 heads x 16 dims

    model, tokenizer = kvlab.load(str(tiny_llama_dir))
    keep_ends = load_strategy(spec)
    inputs = tokenizer(PROMPT, return_tensors="pt")
    plain = model.generate(
        **inputs, do_sample=False, max_new_tokens=20, past_key_values=Cache(layer_class_to_replicate=keep_ends)
    )
    assert plain[0, inputs.input_ids.shape[-1] :].tolist() == data["generated_token_ids"]

    bench = ["bench", "--model", str(tiny_llama_dir), "--device", "cpu", "--only", "static", "--no-progress"]
    bench += ["--prompt-tokens", "24", "--new-tokens", "4", "--repeats", "1", "--quality-windows", "1"]
    assert main([*bench, "--cache", spec, "--json"]) == 0
    rows = {row["label"]: row for row in json.loads(capsys.readouterr().out)["rows"]}
    assert rows["KeepEnds"]["status"] == "measured" and rows["KeepEnds"]["ratio_vs_dynamic"] < 1
