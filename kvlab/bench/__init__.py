"""`kvlab bench`: the guide's comparison table, measured on this machine.

    from kvlab.bench import BenchSettings, run_bench, markdown_table
    result = run_bench(model, tokenizer, BenchSettings(prompt_tokens=128, new_tokens=32, repeats=3))

One module per concept: configs (what runs), text (the pydoc windows), timing (clock, interleaving, medians),
quality (teacher forcing, perplexity, KL, agreement), roofline (bandwidth, bytes per token), compile
(torch.compile time and recompiles), support (unsupported reasons), published (external reference points),
runner (the orchestration), report (markdown and JSON).
"""

from kvlab.bench.configs import GUIDE, BenchConfig, default_configs
from kvlab.bench.report import markdown_table, write_json
from kvlab.bench.runner import BenchSettings, run_bench

__all__ = ["GUIDE", "BenchConfig", "BenchSettings", "default_configs", "markdown_table", "run_bench", "write_json"]
