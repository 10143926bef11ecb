#!/usr/bin/env bash
# The GPU check for a lent GPU (15 minutes a lease, start-up included): one call, everything within
# BUDGET seconds (480 by default). First the GPU tests of the fp16 fix (tests/training/test_gpu.py
# and test_mixed_precision_steps.py, which run the fused-kernel overflow tests on CUDA; skip them
# with GPU_TESTS=0), then gpu_check.py with what is left of the budget; it writes
# benchmarks/results/DATE-TAG.json (e.g. 2026-11-27-h100x1.json). `timeout` is the backstop.
#
#   benchmarks/gpu_check.sh                      # .venv/bin/python
#   PYTHON=python3 BUDGET=420 benchmarks/gpu_check.sh --pairs bf16,fp16
#
# Needs, on the GPU machine: torch with CUDA (pytest for the tests), torchvision and Pillow (the
# ImageFolder pair is skipped, with the reason recorded, without the last two).
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-.venv/bin/python}"
BUDGET="${BUDGET:-480}"
START=$(date +%s)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || true
"$PY" -c "import torch; assert torch.cuda.is_available(), 'this torch has no CUDA'; print('torch', torch.__version__)" || exit 2
TESTS=0
if [ "${GPU_TESTS:-1}" = 1 ]; then
    timeout 150 "$PY" -m pytest -q -p no:cacheprovider --basetemp="$(mktemp -d)" \
        tests/training/test_gpu.py tests/training/test_mixed_precision_steps.py
    TESTS=$?
    echo "gpu tests: exit $TESTS"
fi
LEFT=$(( BUDGET - ($(date +%s) - START) ))
timeout --kill-after=20 "$(( LEFT + 30 ))" "$PY" benchmarks/gpu_check.py --budget "$LEFT" --out benchmarks/results "$@"
CHECK=$?
echo "gpu_check: exit $CHECK, $(( $(date +%s) - START )) s in all"
[ "$TESTS" = 0 ] && exit "$CHECK" || exit 1
