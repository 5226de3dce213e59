"""`kvlab bench`: every cache kind on one model, measured here: bytes, speed, quality, roofline."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from kvlab.atomic import check_writable, open_atomic, write_text
from kvlab.cache_kinds import BY_NAME, KINDS, is_strategy_spec
from kvlab.commands import Output, UsageError, add_command, add_model_options, add_output_options
from kvlab.commands.quantized_options import NAMES as QUANTIZED_NAMES
from kvlab.commands.quantized_options import add_quantized_options, chosen_rows
from kvlab.i18n import _


def cache_argument(text: str) -> str:
    """`--cache` of `kvlab run` and `kvlab bench`: a kind name, or a strategy's "FILE.py:ClassName" (the file is
    read when the command runs, before any model loads)."""
    if text in BY_NAME or is_strategy_spec(text):
        return text
    raise argparse.ArgumentTypeError(
        _("invalid cache {text!r}; valid: {valid}, or FILE.py:ClassName (a cache layer class of yours)").format(
            text=text, valid=", ".join(kind.name for kind in KINDS)
        )
    )


def strategy_argument(text: str) -> str:
    """`kvlab bench --cache`: a strategy only (the kinds are measured anyway)."""
    if is_strategy_spec(text):
        return text
    raise argparse.ArgumentTypeError(
        _("--cache takes a strategy, FILE.py:ClassName (a cache layer class of yours); got {text!r}").format(text=text)
    )


def add_parser(subparsers) -> None:
    p = add_command(
        subparsers,
        "bench",
        "measure every cache kind: memory, speed, quality, roofline",
        "kvlab bench --model smollm2 --only dynamic,static --repeats 5 --markdown bench.md",
        "kvlab bench --overhead --repeats 9",
        "kvlab bench --model smollm2 --cache my_strategy.py:KeepEnds --only static",
        "kvlab bench --model smollm2 --only quantized --backend hqq --nbits 4 --q-group-size 32",
    )
    add_model_options(p, default="smollm2")
    p.add_argument("--prompt-tokens", type=int, default=128, help="tokens of each prompt")
    p.add_argument("--new-tokens", type=int, default=32, help="tokens generated per run")
    p.add_argument("--repeats", type=int, default=3, help="timed runs per configuration, interleaved")
    p.add_argument("--quality-windows", type=int, default=2, help="pydoc text windows for perplexity and KL")
    p.add_argument(
        "--compile",
        action="store_true",
        help="also run static + torch.compile (compile time, recompiles; minutes on a CPU)",
    )
    p.add_argument(
        "--only",
        help="comma-separated words: run only the configurations whose label contains one "
        "(dynamic, the reference, always runs), e.g. --only quanto,hqq",
    )
    p.add_argument(
        "--cache",
        action="append",
        default=[],
        type=strategy_argument,
        metavar="FILE.py:ClassName",
        help="also measure a strategy of yours: a transformers cache layer class (a DynamicLayer subclass), a row "
        "beside the kinds (repeat for more); with --overhead, what recording it costs against a built-in layer",
    )
    add_output_options(p, "the whole result (rows under 'rows') instead of the markdown table")
    p.add_argument("--markdown", metavar="FILE", help="also write the markdown table to FILE")
    p.add_argument("--plots", help="write the frontier plot (frontier.png) into this directory")
    p.add_argument("--threads", type=int, help="torch CPU threads (on a shared CPU, 1 can be much faster)")
    p.add_argument(
        "--batching",
        type=int,
        metavar="N",
        help="also time continuous batching (generate_batch) of the "
        "first N workload requests against one generate each",
    )
    p.add_argument(
        "--overhead",
        action="store_true",
        help="measure only what watching costs: plain generate and the same call inside kvlab.watch, on the whole "
        "run, in pairs that take turns token by token (at least --repeats, more until the interval resolves 1 %%, at "
        "most 41), then the run's cache calls replayed as a breakdown (--json: the whole result)",
    )
    p.add_argument("--from-json", help="measure nothing: render --markdown/--plots from a saved --json result")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_quantized_options(p, rows=lambda backend: backend.bench_nbits)
    p.set_defaults(handler=handle)


def handle(args) -> int:
    from kvlab.bench import BenchConfig, BenchSettings, default_configs, run_bench
    from kvlab.strategies.load import load_strategy, strategy_name

    for path in filter(None, (args.output, args.markdown)):  # minutes of measuring must not end in an unwritable path
        check_writable(path)
    if args.plots is not None and Path(args.plots).exists() and not Path(args.plots).is_dir():
        raise UsageError(
            _("--plots {plots} is a file; name a directory (it is created if missing)").format(plots=args.plots)
        )
    if args.from_json:
        if args.overhead:
            raise UsageError(_("--overhead measures; --from-json renders a saved bench result: pick one"))
        return render_saved(args)
    names = ("model", "prompt_tokens", "new_tokens", "repeats", "quality_windows", "compile", "dtype", "threads")
    settings = BenchSettings(**{name: getattr(args, name) for name in names})
    settings.check()  # a ValueError: one line, exit 2 (kvlab.cli)
    if args.batching is not None and args.batching < 1:
        raise UsageError(_("--batching N needs N >= 1 requests; got {batching}").format(batching=args.batching))
    quantized = chosen_rows(args)  # refused here, before the model loads
    if args.overhead:
        extra = [name for name in ("compile", "only", "batching", "markdown", "plots") if getattr(args, name)]
        extra += [name.replace("_", "-") for name in QUANTIZED_NAMES if name in quantized]
        if extra:
            raise UsageError(
                _("--overhead runs alone; it does not take --{options}").format(options=", --".join(extra))
            )
        return measure_overhead(settings, args)
    configs = default_configs(settings.prompt_tokens, settings.new_tokens, settings.compile, **quantized)
    if args.only:
        words = [w.strip() for w in args.only.split(",") if w.strip()]
        chosen = [c for c in configs if c.label == "dynamic" or any(w in c.label for w in words)]
        if len(chosen) == 1:
            raise UsageError(
                _("--only {only!r} matches no configuration; labels: {labels}").format(
                    only=args.only, labels=", ".join(c.label for c in configs)
                )
            )
        configs = chosen
    for spec in args.cache:  # each strategy's file and class checked before any model loads (one line if wrong)
        load_strategy(spec)
        configs.append(BenchConfig(strategy_name(spec), spec))
    model, tokenizer = _load(args)
    result = run_bench(model, tokenizer, settings, configs, progress=not args.no_progress)
    if args.batching:
        from kvlab.measure.batching import batching_row
        from kvlab.serving import load_workload

        prompts = load_workload(tokenizer).input_ids[: args.batching]
        result["batching"] = batching_row(model, prompts, settings.new_tokens, repeats=settings.repeats)
    return render(result, args)


def measure_overhead(settings, args) -> int:
    """`kvlab bench --overhead`: the instrumentation overhead alone; exit status 1 when the tokens differ."""
    from kvlab.bench.overhead import overhead_lines, run_overhead
    from kvlab.strategies.load import load_strategy

    strategies = tuple(load_strategy(spec) for spec in args.cache)  # checked before the model loads
    result = run_overhead(*_load(args), settings, strategies)
    out = Output(args)
    out.print(json.dumps(result, indent=1) if args.json else "\n".join(overhead_lines(result)))
    out.close()
    return 0 if result["same_tokens"] else 1


def _load(args):
    from kvlab import models

    return models.load(args.model, dtype=args.dtype, device=models.parse_device(args.device))


def render_saved(args) -> int:
    path = Path(args.from_json)
    if not path.is_file():
        raise UsageError(_("--from-json {path}: no such file").format(path=path))
    try:
        result = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise UsageError(_("--from-json {path}: not JSON ({error})").format(path=path, error=err.msg)) from err
    if not isinstance(result, dict) or not {"meta", "rows", "roofline"} <= set(result):
        raise UsageError(
            _("--from-json {path}: not a kvlab bench result (needs meta, rows, roofline)").format(path=path)
        )
    return render(result, args)


def render(result: dict, args) -> int:
    from kvlab.bench import markdown_table
    from kvlab.bench.report import to_json

    model = result["meta"]["model"]
    table = markdown_table(result)
    if args.markdown:
        write_text(args.markdown, table)
    out = Output(args)
    out.print(to_json(result) if args.json else table.rstrip("\n"))
    out.close()
    if args.plots:
        from kvlab.plots.frontier import frontier

        directory = Path(args.plots)
        directory.mkdir(parents=True, exist_ok=True)
        fig = frontier(
            result["rows"],
            title=f"{model}: quality–memory frontier\nblue: measured by kvlab here; "
            "orange dashed: published, external references (not kvlab)",
        )
        with open_atomic(directory / f"frontier_{Path(model).name}.png") as handle:  # a local model: its folder's name
            fig.savefig(handle, format="png", dpi=120)
    return 0
