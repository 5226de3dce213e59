"""`kvlab size`: the KV bytes of every cache kind for an architecture, without loading weights."""

from __future__ import annotations

import json


def add_parser(subparsers) -> None:
    from kvlab.size import DTYPE_BYTES

    p = subparsers.add_parser("size", help="KV-cache bytes of every cache kind for a model architecture")
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--model", help="a known architecture (kvlab size --list shows them)")
    which.add_argument("--config", help="a config.json file")
    which.add_argument("--list", action="store_true", help="list the known architectures and their sources")
    p.add_argument("--tokens", type=int, help="tokens held in the cache")
    p.add_argument("--prefill", type=int, help="tokens of the first forward (default: all --tokens); "
                                               "the rest arrive one per decode step")  # fmt: skip
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--dtype", default=None, choices=list(DTYPE_BYTES),
                   help="cache dtype (default: the dtype of the published weights, else float32)")  # fmt: skip
    p.add_argument("--max-cache-len", type=int, help="static kinds: slots per layer (default: --tokens)")
    p.add_argument("--source-tokens", type=int, help="encoder-decoder: encoder tokens (default: --tokens)")
    p.add_argument("--axis", type=int, choices=(0, 1), default=0, help="quantized: hqq axis 0 or 1 (quanto 0 or -1)")
    p.add_argument("--q-group-size", type=int, help="quantized: group size (default 64)")
    p.add_argument("--residual-length", type=int, help="quantized: residual tokens (default 128)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(handler=handle)


def handle(args) -> int:
    from kvlab.cli import UsageError
    from kvlab.size import architecture, format_rows, from_config_file, known_architectures, size_rows

    if args.list:
        for name in known_architectures():
            print(architecture(name).describe())
        return 0
    if args.tokens is None or args.tokens < 1:
        raise UsageError("--tokens N (N >= 1) is required")
    for name in ("batch", "prefill", "max_cache_len", "source_tokens", "q_group_size", "residual_length"):
        value = getattr(args, name)
        if value is not None and value < 1:
            raise UsageError(f"--{name.replace('_', '-')} must be at least 1; got {value}")
    arch = architecture(args.model) if args.model else from_config_file(args.config)
    dtype = args.dtype or (arch.dtype if arch.dtype in ("float32", "float16", "bfloat16") else "float32")
    rows = size_rows(arch, args.tokens, batch=args.batch, dtype=dtype, prefill=args.prefill,
                     max_cache_len=args.max_cache_len, source_tokens=args.source_tokens, axis=args.axis,
                     q_group_size=args.q_group_size, residual_length=args.residual_length)  # fmt: skip
    if args.json:
        facts = {k: v for k, v in vars(arch).items() if k != "config"}
        print(json.dumps({"architecture": facts, "tokens": args.tokens, "batch": args.batch, "dtype": dtype,
                          "rows": rows}, default=list))  # fmt: skip
        return 0
    print(f"{args.tokens:,} tokens, batch {args.batch}, {dtype}")
    print(format_rows(arch, rows, args.tokens))
    return 0
