"""`kvlab size`: the KV bytes of every cache kind for an architecture, without loading weights.

The bytes are transformers' own, from the meta device (`kvlab.size.meta`): stored for the known names (so
`--model NAME` needs no torch), measured for a `--config` file or a `--model-type`."""

from __future__ import annotations

import argparse
import json

from kvlab.commands import Output, UsageError, add_command, add_output_options
from kvlab.commands.quantized_options import add_quantized_options, chosen_rows
from kvlab.i18n import _
from kvlab.names import DTYPES  # kvlab.names imports nothing heavy: building the parser stays torch-free


def add_parser(subparsers) -> None:
    p = add_command(
        subparsers,
        "size",
        "KV-cache bytes of every cache kind for a model architecture",
        "kvlab size --model smollm2 --tokens 4096",
        "kvlab size --model llama-3-8b --tokens 32768 --batch 8 --dtype bfloat16",
        "kvlab size --model deepseek-v3 --tokens 131072",
        "kvlab size --model-type qwen3_next --tokens 32768",
        "kvlab size --model smollm2 --tokens 4096 --backend hqq --axis-key 1 --axis-value 1 --q-group-size 32",
        "kvlab size --list",
    )
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--model", help="a known architecture (kvlab size --list shows them)")
    which.add_argument("--config", help="a config.json file (sized by transformers on the meta device)")
    which.add_argument(
        "--model-type",
        help="any model_type of the installed transformers, with its default config (AutoConfig.for_model(NAME); "
        "for many types the published model, e.g. deepseek_v3, qwen3_next, gpt_oss)",
    )
    which.add_argument("--list", action="store_true", help="list the known architectures and their sources")
    p.add_argument("--tokens", type=int, help="tokens held in the cache")
    p.add_argument(
        "--prefill",
        type=int,
        help="tokens of the first forward (default: all --tokens); the rest arrive one per decode step",
    )
    p.add_argument("--batch", type=int, default=1, help="sequences held side by side")
    p.add_argument(
        "--dtype",
        default=None,
        choices=DTYPES,
        help="cache dtype (default: float32 for kvlab's bundled models, as kvlab loads them; for other models the "
        "dtype of the published weights, else float32)",
    )
    p.add_argument("--max-cache-len", type=int, help="static kinds: slots per layer (default: --tokens)")
    p.add_argument("--source-tokens", type=int, help="encoder-decoder: encoder tokens (default: --tokens)")
    p.add_argument("--page-size", type=int, help="add the paged layout (generate_batch): blocks of this many slots")
    p.add_argument(
        "--lengths",
        type=_lengths,
        help="paged: tokens each request holds, e.g. 120,800,37 (default: --batch requests of --tokens)",
    )
    add_quantized_options(p, rows=lambda backend: backend.nbits)
    p.add_argument(
        "--axis",
        type=int,
        choices=(0, 1),
        default=0,
        help="deprecated: --axis-key A --axis-value A, for every backend that takes them (1 is quanto's -1)",
    )
    add_output_options(p)
    p.set_defaults(handler=handle)


def _default_dtype(arch) -> str:
    """The dtype a user would run: kvlab loads its bundled models in float32, others run as published."""
    return arch.dtype if not arch.bundled and arch.dtype in ("float32", "float16", "bfloat16") else "float32"


def handle(args) -> int:
    quantized = {}
    if not args.list:  # bad input is refused before anything heavy is imported
        _check_counts(args)
        for name in ("axis_key", "axis_value"):  # deprecated `--axis A`: where those are not given (0 is their default)
            if args.axis and getattr(args, name) is None:
                setattr(args, name, args.axis)
        quantized = chosen_rows(args)
    from kvlab.size import architecture, format_rows, from_config_file, from_model_type, position_notes, size_rows

    out = Output(args)
    if args.list:
        from kvlab.size import known_architectures

        archs = [architecture(name) for name in known_architectures()]
        data, text = [_facts(arch) for arch in archs], "\n".join(arch.describe() for arch in archs)
    else:
        if args.model:
            arch = architecture(args.model)
        elif args.model_type:
            arch = from_model_type(args.model_type)
        else:
            arch = from_config_file(args.config)
        dtype = args.dtype or _default_dtype(arch)
        sizing = {name: getattr(args, name) for name in ("prefill", "max_cache_len", "source_tokens", "page_size")}
        sizing |= quantized
        rows = size_rows(arch, args.tokens, batch=args.batch, dtype=dtype, **sizing, lengths=args.lengths)
        notes = position_notes(arch, args.tokens, source_tokens=args.source_tokens, lengths=args.lengths)
        facts = {"architecture": _facts(arch), "tokens": args.tokens, "batch": args.batch, "dtype": dtype}
        data = {**facts, "notes": notes, "rows": rows}
        text = f"{args.tokens:,} tokens, batch {args.batch}, {dtype}\n" + format_rows(arch, rows, args.tokens, notes)
    out.print(json.dumps(data, default=list) if args.json else text)
    out.close()
    return 0


def _check_counts(args) -> None:
    if args.tokens is None or args.tokens < 1:
        raise UsageError(_("--tokens N (N >= 1) is required"))
    for name in ("batch", "prefill", "max_cache_len", "source_tokens", "q_group_size", "residual_length", "page_size"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UsageError(
                _("--{option} must be at least 1; got {value}").format(option=name.replace("_", "-"), value=value)
            )


def _facts(arch) -> dict:
    from kvlab.size.architecture import DERIVED_FIELDS

    names = ("name", "source", *DERIVED_FIELDS, "dtype", "bundled", "note", "max_positions")
    return {name: getattr(arch, name) for name in names}


def _lengths(text: str) -> list[int]:
    """--lengths 120,800,37: every request holds at least one token."""
    try:
        lengths = [int(part) for part in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            _("expected comma-separated token counts like 120,800,37; got {text!r}").format(text=text)
        ) from None
    if not lengths or min(lengths) < 1:
        raise argparse.ArgumentTypeError(_("every length must be at least 1; got {text!r}").format(text=text))
    return lengths
