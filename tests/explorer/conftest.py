"""Fixtures for the explorer's callback tests: tiny models (fast) and a gate to hold a run mid-generation."""

from __future__ import annotations

import threading

import pytest

PROMPT = "The KV cache keeps keys and values."


@pytest.fixture
def gate():
    """gate(after=n) -> (on_token, release): on_token blocks the generating thread after n tokens until release()."""
    events = []

    def make(after: int = 1):
        reached, opened = threading.Event(), threading.Event()
        events.append(opened)

        def on_token(run) -> None:
            if len(run.new_ids) >= after:
                reached.set()
                opened.wait(30)

        on_token.reached = reached
        return on_token, opened.set

    yield make
    for opened in events:  # never leave a generating thread blocked
        opened.set()


@pytest.fixture(autouse=True)
def fresh_models(monkeypatch):
    """Each test starts with no model loaded in the explorer's process-wide store (tiny models load in ms)."""
    from kvlab.explorer import models

    monkeypatch.setattr(models, "_SHARED", {})
