"""kvlab runs offline: since transformers 5.25 requires the `kernels` package (a client of the Hub's kernel
repositories), a bundled model's load, a watched generate and `kvlab.run` must still open no network connection."""

import json
import subprocess
import sys
import textwrap

import pytest

# A fresh interpreter, so that every import (transformers, kernels, hub clients) happens under the guard.
GUARDED = textwrap.dedent(
    """
    import json, socket

    attempts = []
    real_connect = socket.socket.connect

    def guarded_connect(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6):
            attempts.append(repr(address))
            raise OSError("kvlab's offline test: no network")
        return real_connect(self, address)

    socket.socket.connect = guarded_connect

    import kernels  # what 5.25 brought in
    from transformers import DynamicCache

    import kvlab

    model, tokenizer = kvlab.load("smollm2")
    result = kvlab.run(model, tokenizer, "The cache", cache="dynamic", max_new_tokens=2)
    ids = tokenizer("The cache", return_tensors="pt").input_ids
    with kvlab.watch(model) as watched:
        model.generate(ids, past_key_values=DynamicCache(config=model.config), max_new_tokens=2, do_sample=False)
    tokens = len(result.generated_token_ids)
    print(json.dumps({"attempts": attempts, "tokens": tokens, "events": len(watched.trace.events)}))
    """
)


@pytest.mark.real_model
def test_a_bundled_model_loads_and_generates_without_opening_a_connection():
    done = subprocess.run([sys.executable, "-c", GUARDED], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["attempts"] == []
    assert report["tokens"] == 2 and report["events"] > 0  # the runs ran, not only the imports
