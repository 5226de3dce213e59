#!/usr/bin/env bash
# kvlab bench on a CUDA machine, in at most ~7 minutes: both bundled models, device memory (max allocated),
# real offloading (transformers' own offloaded cache runs there), static + torch.compile, and the notebooks'
# timing measurements (bench/timing.py: decode step vs max_cache_len, time per token, with intervals).
#
# NOT RUN YET: written on a CPU-only machine (no GPU was lent to this session). Expects the repo's virtual
# environment with a CUDA build of torch and the bundled models already prepared (`kvlab models prepare all`,
# or a copied KVLAB_HOME). Results land in data/bench/gpu/ (markdown, JSON, frontier plots).
#
#   bash bench/gpu.sh            # or: OUT=/tmp/out PYTHON=python bash bench/gpu.sh
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
OUT=${OUT:-data/bench/gpu}
mkdir -p "$OUT"

"$PYTHON" - <<'PY'
import torch
assert torch.cuda.is_available(), "bench/gpu.sh needs a CUDA device (torch.cuda.is_available() is False)"
print("device:", torch.cuda.get_device_name(0), "| torch", torch.__version__)
PY

# Each step has its own time limit so the whole script stays under 5 minutes even if compile is slow.
run() {  # run SECONDS NAME ARGS...
  local seconds=$1 name=$2; shift 2
  echo "== $name (limit ${seconds}s)"
  timeout "$seconds" "$PYTHON" -m kvlab.cli bench --device cuda --no-progress "$@" \
      --json --output "$OUT/$name.json" --markdown "$OUT/$name.md" --plots "$OUT" \
    || echo "!! $name did not finish (exit $?)"
}
run 130 smollm2 --model smollm2 --prompt-tokens 1024 --new-tokens 128 --repeats 3 --compile
run 100 gemma3  --model gemma3  --prompt-tokens 1024 --new-tokens 128 --repeats 3
echo "== overhead (limit 60s)"
timeout 60 "$PYTHON" -m kvlab.cli bench --overhead --model smollm2 --device cuda --prompt-tokens 1024 \
    --new-tokens 128 --repeats 5 --json --output "$OUT/overhead.json" || echo "!! overhead did not finish (exit $?)"
echo "== timing: decode step vs max_cache_len, time per token (limit 120s)"
timeout 120 "$PYTHON" bench/timing.py --device cuda --output "$OUT/timing.json" || echo "!! timing did not finish (exit $?)"
ls -l "$OUT"
