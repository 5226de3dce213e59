"""A byte-level stand-in tokenizer for the tiny models (vocab 128): what `text.token_windows` cuts windows from."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch


class ByteTokenizer:
    """Text -> one id per UTF-8 byte, folded into the tiny vocabulary (ids 3..127)."""

    pad_token_id = 0

    def __call__(self, text, return_tensors="pt", add_special_tokens=False):
        ids = [3 + b % 125 for b in text.encode()]
        return SimpleNamespace(input_ids=torch.tensor([ids]))


@pytest.fixture(scope="session")
def byte_tokenizer():
    return ByteTokenizer()
