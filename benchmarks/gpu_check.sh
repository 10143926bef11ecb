#!/usr/bin/env bash
# The GPU check for a lent GPU (15 minutes a lease, start-up included): one call, under 9 minutes
# whatever happens. gpu_check.py keeps to --budget (480 s by default) and writes
# benchmarks/results/DATE-TAG.json (e.g. 2026-11-27-h100x1.json); `timeout` is the backstop.
#
#   benchmarks/gpu_check.sh                      # .venv/bin/python
#   PYTHON=python3 BUDGET=420 benchmarks/gpu_check.sh
#
# Needs, on the GPU machine: torch with CUDA, torchvision and Pillow (the ImageFolder pair is
# skipped, with the reason recorded, without the last two).
set -euo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
"$PY" -c "import torch; assert torch.cuda.is_available(), 'this torch has no CUDA'; print('torch', torch.__version__)"
exec timeout --kill-after=20 "$(( ${BUDGET:-480} + 60 ))" "$PY" benchmarks/gpu_check.py --budget "${BUDGET:-480}" \
    --out benchmarks/results "$@"
