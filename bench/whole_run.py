"""What the whole-run scripts of watching's cost share (`watch_lockstep.py`, `watch_instructions.py`): their options,
how they write their rows, and one side of a comparison: the model loaded, warmed up, and run plain or watched
through the same `generate_once` as `kvlab bench --overhead`'s pairs."""

from __future__ import annotations

import argparse
import contextlib
import json

LENGTHS = ("128+32", "16+512")


def parse_length(text: str) -> tuple[int, int]:
    """'128+32' -> (128, 32): prompt tokens + new tokens."""
    try:
        prompt, new = (int(part) for part in text.split("+"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"a length is PROMPT+NEW tokens, e.g. 128+32; got {text!r}") from None
    if prompt < 2 or new < 2:
        raise argparse.ArgumentTypeError(f"PROMPT and NEW must each be at least 2; got {text!r}")
    return prompt, new


def whole_run_parser(description: str) -> argparse.ArgumentParser:
    """The options every whole-run script takes."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--model", default="smollm2", help="a bundled model or a saved directory (default smollm2)")
    parser.add_argument(
        "--lengths", nargs="+", type=parse_length, default=[parse_length(x) for x in LENGTHS], help="PROMPT+NEW ..."
    )
    parser.add_argument("--output", help="write the JSON to FILE (atomically) as well as printing the lines")
    return parser


def write_rows(path: str | None, model_name: str, rows: list[dict]) -> None:
    """The rows as JSON in `path` (atomically), where one was given."""
    if path:
        from kvlab.atomic import write_text

        write_text(path, json.dumps({"model": model_name, "rows": rows}, indent=1) + "\n")


class Side:
    """One side of a whole-run comparison, in this process: `model_name` loaded on one torch thread, the first
    `prompt` tokens of the pydoc text as its prompt, and warmed up alike on every side (2 tokens plain, then 2
    watched, after the prompt's first `warm_prompt` tokens; all of it by default), so that what runs once (lazy
    imports, first calls) is in no timed or counted run."""

    def __init__(self, model_name: str, prompt: int, warm_prompt: int | None = None):
        import torch

        import kvlab
        from kvlab.bench.configs import BenchConfig
        from kvlab.measure.text import token_windows

        torch.set_num_threads(1)
        self.model, self.tokenizer = kvlab.load(model_name)
        self.ids = token_windows(self.tokenizer, prompt, 1, 0)[0]  # (1, prompt)
        self.plain = BenchConfig("plain", "dynamic", plain=True)  # transformers' own DynamicCache
        for watched in (False, True):
            self.generate(watched, 2, self.ids[:, :warm_prompt])

    def generate(self, watched: bool, new: int, ids=None, clock=None) -> tuple[list[int], object]:
        """(the `new` tokens generated greedily after `ids` (the prompt by default), the `kvlab.watch` they ran in,
        None when plain). `clock`: the streamer that times the call (a `DecodeClock`)."""
        import kvlab
        from kvlab.bench.runner import generate_once

        ids = self.ids if ids is None else ids
        with kvlab.watch(self.model) if watched else contextlib.nullcontext() as watch:
            tokens = generate_once(self.model, self.tokenizer, self.plain, ids, new, clock=clock)["tokens"]
        return tokens, watch
