"""`kvlab run`: greedy generation with an instrumented cache; a human summary or `--json`.

An impossible request costs nothing: it is checked (`kvlab.request`) before the config loads and again before the
weights do. The report is written before the trace, so a trace that fails to save does not take the report with it.
"""

from __future__ import annotations

import json
import sys

# torch-free: the parser stays light
from kvlab.cache_kinds import BY_NAME, CACHE_KINDS, OPTION_NAMES, STATIC_KINDS
from kvlab.commands import Output, UsageError, add_command, add_model_options, add_output_options, read_text_argument
from kvlab.commands.bench import cache_argument
from kvlab.commands.quantized_options import add_quantized_options
from kvlab.i18n import _


def add_parser(subparsers) -> None:
    p = add_command(
        subparsers,
        "run",
        "generate greedily with an instrumented cache and report what it held",
        'kvlab run --model smollm2 --cache static --prompt "The KV cache" --max-new-tokens 16',
        'kvlab run --model gemma3 --cache quantized --backend hqq --nbits 4 --prompt "Hi" --max-new-tokens 8 --json',
    )
    add_model_options(p, required=True)
    p.add_argument(  # a batch kind is accepted here so that the option check says where it runs instead
        "--cache",
        required=True,
        type=cache_argument,
        metavar="CACHE_KIND",
        help="; ".join(f"{name}: {BY_NAME[name].help}" for name in CACHE_KINDS)
        + "; FILE.py:ClassName: a strategy of yours, a transformers cache layer class (a DynamicLayer subclass)",
    )
    add_quantized_options(p)
    p.add_argument(
        "--max-cache-len",
        type=int,
        help=f"{', '.join(STATIC_KINDS)}: slots per layer (default: what transformers' generate allocates, prompt + "
        "new tokens - 1)",
    )
    group = p.add_mutually_exclusive_group()
    group.add_argument(
        "--offload-only-non-sliding",
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
    chat = p.add_mutually_exclusive_group()
    chat.add_argument(
        "--chat",
        action="store_const",
        const="on",
        default="auto",
        help="wrap the prompt in the model's chat template, refused for a model without one (default: wrapped "
        "when the model's tokenizer has a chat template, as smollm2's has, and raw otherwise, as for gemma3)",
    )
    chat.add_argument(
        "--no-chat-template",
        "--raw",
        dest="chat",
        action="store_const",
        const="off",
        help="give the prompt to the model as it is, without its chat template (default: the template is used "
        "when the model's tokenizer has one)",
    )
    p.add_argument("--max-new-tokens", type=int, required=True, help="tokens to generate (greedy; fewer if EOS comes)")
    add_output_options(p)
    p.add_argument("--trace", help="also save the full trace as JSON to this file")
    p.add_argument(
        "--allow-past-positions",
        action="store_true",
        help="generate past the model's max_position_embeddings (refused by default: quality drifts or it fails)",
    )
    p.set_defaults(handler=handle)


def chat_template(choice: str, tokenizer) -> str:
    """How the prompt reaches the model: "applied" (its chat template), "off" (raw, by `--no-chat-template`) or
    "none" (raw: the tokenizer has no template). `choice` is the command's "auto", "on" or "off"."""
    has_template = getattr(tokenizer, "chat_template", None) is not None
    if choice == "on" and not has_template:
        raise UsageError(_("--chat: this model's tokenizer has no chat template; run without --chat"))
    if choice == "off":
        return "off"
    return "applied" if has_template else "none"


def handle(args) -> int:
    from dataclasses import replace

    from kvlab import models
    from kvlab.caches.options import check_prompt_length
    from kvlab.recorded_run import encode, run
    from kvlab.request import Request
    from kvlab.rules import check

    if args.max_new_tokens < 1:
        raise UsageError(_("--max-new-tokens must be at least 1"))
    options = {name: getattr(args, name) for name in OPTION_NAMES}
    request = Request(args.cache, options, paths=(args.output, args.trace), generate_sizes=True)
    check(request)
    if args.prompt_file:
        prompt = read_text_argument(args.prompt_file)
    elif args.prompt is None:
        raise UsageError(_("give --prompt TEXT or --prompt-file FILE"))
    else:
        prompt = args.prompt
    device = models.parse_device(args.device)
    config, tokenizer = models.load_config_and_tokenizer(args.model)
    template = chat_template(args.chat, tokenizer)
    if template == "applied" and not prompt:
        check_prompt_length(0)  # the template would wrap nothing into a turn of its own markup
    ids = encode(tokenizer, prompt, chat=template == "applied")
    check(
        replace(
            request,
            facts=config,
            prompt_tokens=ids.shape[-1],
            new_tokens=args.max_new_tokens,
            paths=(),  # checked above
            dtype=args.dtype,
            device=device,
            allow_past_positions=args.allow_past_positions,
        )
    )
    model, tokenizer = models.load(args.model, dtype=args.dtype, device=device, config=config, tokenizer=tokenizer)
    live = LiveRun(
        tokenizer,
        args.max_new_tokens,
        text=not args.json and args.output is None and sys.stdout.isatty(),
        progress=sys.stderr,
    )
    try:
        result = run(
            model,
            tokenizer,
            ids,
            cache=args.cache,
            max_new_tokens=args.max_new_tokens,
            allow_past_positions=args.allow_past_positions,
            generate_kwargs={"streamer": live} if live.active else None,
            **options,
        )
    finally:
        live.close()
    data = result.to_dict()
    data["chat_template"] = template
    data["stop_reason"] = stop_reason(data["generated_token_ids"], args.max_new_tokens, model.generation_config)
    out = Output(args)
    if args.json:
        out.print(json.dumps(data))
    else:
        report(out, data)
    out.close()  # stdout, or --output written atomically (kvlab.atomic)
    if args.trace and not result.no_cache:  # no empty trace: `run` said in one line that nothing was traced
        result.trace.save(args.trace)  # atomic too (kvlab.atomic.write_text)
    return 0


class LiveRun:
    """`generate(streamer=...)` for `kvlab run`: with `text`, transformers' `TextStreamer` prints the new text;
    else, when `progress` is a terminal, one line there counts the steps and is erased at the end (both at once
    would write over each other). A pipe or a file gets neither."""

    def __init__(self, tokenizer, max_new_tokens: int, text: bool, progress):
        from transformers import TextStreamer

        self.text = TextStreamer(tokenizer, skip_prompt=True, skip_special_tokens=True) if text else None
        self.progress = progress if not text and progress.isatty() else None
        self.total, self.steps = max_new_tokens, 0
        self._prompt_seen = self._ended = self._drawn = False

    @property
    def active(self) -> bool:
        return self.text is not None or self.progress is not None

    def put(self, value) -> None:
        if self.text is not None:
            self.text.put(value)
        if not self._prompt_seen:  # generate puts the prompt first: (1, prompt_tokens)
            self._prompt_seen = True
            self._draw(f"prefill of {value.shape[-1]} tokens…")
            return
        self.steps += 1  # then (1,): one token per decoding step
        self._draw(f"step {self.steps}/{self.total}")

    def end(self) -> None:
        if self.text is not None:
            self.text.end()  # the last words, then a newline
        self._ended = True
        self.close()

    def close(self) -> None:
        """Erase the step line; end a text cut short by an error on its own line (idempotent)."""
        if self._drawn:
            self.progress.write("\r\033[K")
            self.progress.flush()
            self._drawn = False
        if self.text is not None and self.steps and not self._ended:
            print(flush=True)
            self._ended = True

    def _draw(self, what: str) -> None:
        if self.progress is not None:
            self.progress.write(f"\r\033[Kkvlab run: {what}")
            self.progress.flush()
            self._drawn = True


def stop_reason(generated: list[int], max_new_tokens: int, generation_config) -> str:
    """Why generation ended: "max_new_tokens", or "eos" when the model chose an end-of-sequence token first."""
    eos = getattr(generation_config, "eos_token_id", None)
    eos_ids = set(eos if isinstance(eos, (list, tuple)) else [] if eos is None else [eos])
    if len(generated) < max_new_tokens or (generated and generated[-1] in eos_ids):
        return "eos"
    return "max_new_tokens"


# Why a run may end at the end-of-sequence token at once, by how the prompt reached the model (`chat_template`).
EOS_WHY = {
    "applied": "the model ended its answer to the chat turn there; --no-chat-template gives it the prompt raw",
    "off": "the prompt went in raw, and an instruct model given a bare prompt often answers that way: drop "
    "--no-chat-template to use its chat template",
    "none": "the model has no chat template, so the prompt went in as plain text: give it text to continue",
}


def report(out: Output, data: dict) -> None:
    say = out.print
    say(f"{data['model']} | cache {data['cache']} {data['options'] or ''} | {data['dtype']}")
    new = len(data["generated_token_ids"])
    templated = " (in the chat template)" if data["chat_template"] == "applied" else ""
    say(
        f"prompt {data['prompt_tokens']} tokens{templated} -> {new} new token{'' if new == 1 else 's'} "
        f"in {data['seconds']:.2f} s ({data['tokens_per_s']:.1f} tokens/s)"
    )
    if data.get("stop_reason") == "eos":
        say(
            f"stopped at the model's end-of-sequence token after {new} new token{'' if new == 1 else 's'}"
            f" ({EOS_WHY[data['chat_template']]})"
        )
    elif not data["text"]:
        say(f"no text: the new token{'s decode' if new > 1 else ' decodes'} to special tokens, which decoding skips")
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
