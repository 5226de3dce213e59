"""`kvlab bench`: the guide's comparison table, measured on this machine.

    from kvlab.bench import BenchSettings, run_bench, markdown_table
    result = run_bench(model, tokenizer, BenchSettings(prompt_tokens=128, new_tokens=32, repeats=3))

Orchestration only; every measurement it makes comes from `kvlab.measure` (text windows, timing, quality,
roofline, compile, the guide's table and the published reference points). One module per concern:

- `configs`: what runs (one `BenchConfig` per row) and the guide's claims next to each kind;
- `support`: why a configuration cannot run here, in kvlab's and transformers' words;
- `runner`: `run_bench`, every configuration timed, scored and assembled into rows (`generate_once` times one);
- `overhead`: `kvlab bench --overhead`, plain vs instrumented vs watched `generate`;
- `batching`: `kvlab bench --batching N`, continuous batching against one `generate` per request;
- `report`: the markdown table and the JSON.
"""

from kvlab.bench.configs import GUIDE, BenchConfig, default_configs
from kvlab.bench.report import markdown_table, write_json
from kvlab.bench.runner import BenchSettings, run_bench

__all__ = ["GUIDE", "BenchConfig", "BenchSettings", "default_configs", "markdown_table", "run_bench", "write_json"]
