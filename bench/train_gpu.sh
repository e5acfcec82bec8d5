#!/usr/bin/env bash
# Training throughput on one GPU: our DeepSpeed engine (python -m lm_assets.training.train, bf16, ZeRO-1)
# against a plain-torch bf16 loop on the same model (compiled: the ceiling; eager), in tokens/s
# and MFU against 989 TFLOP/s. See bench/train_gpu.py for what is measured.
#
#   bash bench/train_gpu.sh [--cases ...] [--steps 25] [--deadline-s 450]
#   bash bench/train_gpu.sh --dry-run      # CPU, tiny preset, 3 steps of each case: checks the script
#
# Uses $PYTHON, else python3 (on the GPU machine: the one holding PyTorch). Nothing is fetched:
# DeepSpeed and its small dependencies come from wheels in bench/out/gpu_wheels/ when the
# machine lacks them (bench/README.md says how to make that folder); without DeepSpeed only the
# plain-torch paths run, and the output says why. The JSON report also goes to
# $OUT/train_gpu.json when OUT is set, else bench/out/train_gpu.json.
set -uo pipefail
cd "$(dirname "$0")/.."
PY="${PYTHON:-python3}"
export PYTHONUNBUFFERED=1

if ! "$PY" -c "import torch" 2>/dev/null; then
    echo "bench/train_gpu.sh: $PY cannot import torch; set PYTHON to an interpreter that has it" >&2
    exit 2
fi
dry=0
for a in "$@"; do [ "$a" = "--dry-run" ] && dry=1; done
if [ "$dry" = 0 ]; then
    command -v nvidia-smi >/dev/null &&
        nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm --format=csv,noheader
    "$PY" -c "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)" || {
        echo "bench/train_gpu.sh: torch sees no CUDA device (use --dry-run on a CPU machine)" >&2
        exit 2
    }
fi
for m in deepspeed dagster_pipes; do
    if "$PY" -c "import $m" 2>/dev/null; then
        echo "$m: installed"
    else
        n=$(ls bench/out/gpu_wheels/"$m"-*.whl 2>/dev/null | wc -l)
        echo "$m: not installed for $PY ($n wheel(s) of it in bench/out/gpu_wheels)"
    fi
done
out="${OUT:-bench/out}/train_gpu.json"
exec "$PY" bench/train_gpu.py --json-out "$out" "$@"
