"""`kvlab run`: greedy generation with an instrumented cache; a human summary or `--json`.

An impossible request costs nothing: before the weights load, the options are checked, then the files it will
write (`--output`, `--trace`), then, with the config and the tokenizer, whether the cache fits in memory and the
prompt plus new tokens in the model's positions (`kvlab.caches.options.check_request`; `--allow-past-positions`
lets it generate past them). One line, exit status 2. The report is written before the trace, both atomically
(`kvlab.atomic`): a trace that fails to save does not take the report with it.
"""

from __future__ import annotations

from kvlab.cache_kinds import CACHE_KINDS, OPTION_NAMES  # imports nothing: building the parser stays light
from kvlab.commands import Output, UsageError, add_command, add_output_options, read_text_argument


def add_parser(subparsers) -> None:
    p = add_command(
        subparsers,
        "run",
        "generate greedily with an instrumented cache and report what it held",
        'kvlab run --model smollm2 --cache static --prompt "The KV cache" --max-new-tokens 16',
        'kvlab run --model gemma3 --cache quantized --backend hqq --nbits 4 --prompt "Hi" --max-new-tokens 8 --json',
    )
    p.add_argument("--model", required=True, help="smollm2, gemma3, or a local model directory")
    p.add_argument(
        "--cache", required=True, choices=CACHE_KINDS, metavar="CACHE_KIND", help=f"one of {', '.join(CACHE_KINDS)}"
    )
    p.add_argument("--backend", help="quantized: hqq, quanto or fp8")
    p.add_argument("--nbits", type=int, help="quantized: hqq 1,2,3,4,8; quanto 2,4")
    p.add_argument("--axis-key", type=int, help="quantized: hqq 0,1; quanto 0,-1")
    p.add_argument("--axis-value", type=int, help="quantized: hqq 0,1; quanto 0,-1")
    p.add_argument("--q-group-size", type=int, help="quantized: group size")
    p.add_argument("--residual-length", type=int, help="quantized: full-precision residual tokens")
    p.add_argument(
        "--max-cache-len",
        type=int,
        help="static, offloaded_static: slots per layer (default: what "
        "transformers' generate allocates, prompt + new tokens - 1)",
    )
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "--offload-only-non-sliding",
        dest="offload_only_non_sliding",
        action="store_true",
        default=None,
        help="offloaded kinds: keep sliding layers resident",
    )
    group.add_argument(
        "--offload-all",
        dest="offload_only_non_sliding",
        action="store_false",
        help="offloaded kinds: offload every layer",
    )
    prompt = p.add_mutually_exclusive_group()
    prompt.add_argument("--prompt", help="prompt text")
    prompt.add_argument("--prompt-file", help="read the prompt from a file ('-': from stdin)")
    p.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    p.add_argument("--max-new-tokens", type=int, required=True, help="tokens to generate (greedy; fewer if EOS comes)")
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"), help="weights and cache dtype")
    p.add_argument("--device", help="cpu, cuda, cuda:1, mps... (default: cuda when available, else cpu)")
    add_output_options(p)
    p.add_argument("--trace", help="also save the full trace as JSON to this file")
    p.add_argument(
        "--allow-past-positions",
        action="store_true",
        help="generate past the model's max_position_embeddings (refused by default: quality drifts or it fails)",
    )
    p.set_defaults(handler=handle)


def _prompt(args) -> str:
    if args.prompt_file:
        return read_text_argument(args.prompt_file, "prompt file")
    if args.prompt is None:
        raise UsageError("give --prompt TEXT or --prompt-file FILE")
    return args.prompt


def handle(args) -> int:
    from kvlab import models
    from kvlab.caches.options import check_options, check_request
    from kvlab.recorded_run import encode, run

    if args.max_new_tokens < 1:
        raise UsageError("--max-new-tokens must be at least 1")
    options = {name: getattr(args, name) for name in OPTION_NAMES}
    # Every check runs before the weights load: options, output files, prompt, model name, then the config and the
    # prompt length (options, memory, positions).
    check_options(args.cache, options, require_length=False)  # without it, generate sizes a static cache
    check_request(paths=(args.output, args.trace))
    prompt = _prompt(args)
    models.parse_dtype(args.dtype)
    device = models.parse_device(args.device)
    config, tokenizer = models.load_config_and_tokenizer(args.model)
    ids = encode(tokenizer, prompt, chat=args.chat)
    check_options(
        args.cache,
        options,
        config,
        prompt_tokens=ids.shape[-1],
        max_new_tokens=args.max_new_tokens,
        require_length=False,
    )
    check_request(
        config,
        args.cache,
        options,
        prompt_tokens=ids.shape[-1],
        max_new_tokens=args.max_new_tokens,
        dtype=args.dtype,
        device=device,
        allow_past_positions=args.allow_past_positions,
    )
    model, tokenizer = models.load(args.model, dtype=args.dtype, device=device)
    result = run(
        model,
        tokenizer,
        ids,
        cache=args.cache,
        max_new_tokens=args.max_new_tokens,
        allow_past_positions=args.allow_past_positions,
        **options,
    )
    data = result.to_dict()
    data["stop_reason"] = stop_reason(data["generated_token_ids"], args.max_new_tokens, model.generation_config)
    out = Output(args)
    if args.json:
        out.json(data)
    else:
        report(out, data)
    out.close()  # stdout, or --output written atomically (kvlab.atomic)
    if args.trace:
        result.trace.save(args.trace)  # atomic too (kvlab.atomic.write_text)
    return 0


def stop_reason(generated: list[int], max_new_tokens: int, generation_config) -> str:
    """Why generation ended: "max_new_tokens", or "eos" when the model chose an end-of-sequence token first.

    A run that stops after one token with empty text looks broken; it usually means the model answered with its
    end-of-sequence token (an instruct model given a bare prompt, without `--chat`)."""
    eos = getattr(generation_config, "eos_token_id", None)
    eos_ids = set(eos if isinstance(eos, (list, tuple)) else [] if eos is None else [eos])
    if len(generated) < max_new_tokens or (generated and generated[-1] in eos_ids):
        return "eos"
    return "max_new_tokens"


def report(out: Output, data: dict) -> None:
    say = out.print
    say(f"{data['model']} | cache {data['cache']} {data['options'] or ''} | {data['dtype']}")
    new = len(data["generated_token_ids"])
    say(
        f"prompt {data['prompt_tokens']} tokens -> {new} new token{'' if new == 1 else 's'} "
        f"in {data['seconds']:.2f} s ({data['tokens_per_s']:.1f} tokens/s)"
    )
    if data.get("stop_reason") == "eos":
        say(
            f"stopped at the model's end-of-sequence token after {new} new token{'' if new == 1 else 's'}"
            " (an instruct model given a bare prompt often answers that way: try --chat)"
        )
    say(f"text: {data['text']!r}")
    say(f"cache bytes: peak {data['peak_cache_bytes']:,}  final {data['final_cache_bytes']:,}")
    say(
        f"slots: allocated {data['slots_allocated']:,}  live {data['slots_live']:,}  masked {data['slots_masked']:,}"
        f"  ({data['waste_pct']}% waste)  evicted {data['tokens_evicted']:,}"
    )
    say(f"{'layer':>5} {'layer_kind':<10} {'length':>7} {'alloc':>6} {'live':>6} {'masked':>6} {'bytes':>11} device")
    for row in data["layers"]:
        say(
            f"{row['layer_idx']:>5} {row['layer_kind']:<10} {row['logical_length']:>7} {row['slots_allocated']:>6} "
            f"{row['slots_live']:>6} {row['slots_masked']:>6} {row['bytes_held']:>11,} {row['device']}"
        )
