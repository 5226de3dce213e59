"""The request workload of notebook 12: real chat prompts of varied length, in `kvlab/data/requests/` (package data)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

WORKLOAD_PATH = Path(__file__).resolve().parents[1] / "data" / "requests" / "chat_requests.json"  # package data


@dataclass
class Workload:
    ids: list[str]  # request names
    prompts: list[str]  # the user's text
    input_ids: list[list[int]] = field(default_factory=list)  # chat template applied, generation prompt added
    max_new_tokens: int = 24

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def prompt_lengths(self) -> list[int]:
        return [len(ids) for ids in self.input_ids]

    def first(self, n: int) -> Workload:
        return Workload(self.ids[:n], self.prompts[:n], self.input_ids[:n], self.max_new_tokens)


def load_workload(tokenizer=None) -> Workload:
    """The bundled requests; with a tokenizer, each prompt as token ids through the tokenizer's chat template."""
    data = json.loads(WORKLOAD_PATH.read_text(encoding="utf-8"))
    requests = data["requests"]
    workload = Workload(
        [r["id"] for r in requests], [r["prompt"] for r in requests], max_new_tokens=int(data["max_new_tokens"])
    )
    if tokenizer is not None:
        for prompt in workload.prompts:
            encoded = tokenizer.apply_chat_template(
                [{"role": "user", "content": prompt}], add_generation_prompt=True, tokenize=True, return_dict=True
            )
            workload.input_ids.append(list(encoded["input_ids"]))
    return workload
