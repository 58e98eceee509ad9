#!/usr/bin/env bash
# The GPU acceptance (shared/notes/gpu.md) as steps for the lent device, each logging under $OUT (or ./gpu-out).
#
#   bash scripts/gpu_acceptance.sh tests eval          # gpu-marked tests + CUDA-touching files; quick grid + diff
#   bash scripts/gpu_acceptance.sh decode train        # bench eval,loop and train with --device cuda
#
# Run on the device after staging (../shared/tools/device-stage.sh; its a, b, c installs). A step that fails
# is logged and the next one runs anyway: one call should bring back every finding it can.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out"
export PYTHONPATH=$HOME/np/site:$PWD HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
step() {  # name, seconds, command...
    local name=$1 limit=$2; shift 2
    echo "=== $name ($(date +%T), limit ${limit}s): $*" | tee -a "$out/steps.log"
    timeout --kill-after=10 "$limit" "$@" > "$out/$name.log" 2>&1
    local rc=$?
    echo "=== $name rc=$rc ($(date +%T))" | tee -a "$out/steps.log"
    tail -n 25 "$out/$name.log"
}
for what in "$@"; do
    case $what in
    tests)
        nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$out/steps.log"
        python3 -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'transformers', transformers.__version__)" | tee -a "$out/steps.log"
        step pytest-gpu "${GPU_TEST_SECONDS:-330}" python3 -m pytest -q --no-header -p no:cacheprovider \
            tests/harness/test_backend.py tests/scratch tests/harness/test_autoawq.py \
            tests/bench/test_decode.py
        ;;
    eval)
        rm -rf runs/eval-gpu
        step eval "${EVAL_SECONDS:-300}" python3 -m harness.eval --out runs/eval-gpu
        step diff 60 python3 -m harness.diff reports/quick-greedy-n40-seed0 runs/eval-gpu/quick-greedy-n40-seed0
        cp runs/eval-gpu/quick-greedy-n40-seed0/results.csv "$out/eval-results.csv" 2>/dev/null
        ;;
    decode)
        step bench-decode "${DECODE_SECONDS:-420}" python3 -m bench.run --only eval,loop --device cuda --out "$out/bench-gpu"
        ;;
    train)
        step bench-train "${TRAIN_SECONDS:-480}" python3 -m bench.run --only train --device cuda --out "$out/bench-gpu"
        ;;
    *) echo "unknown step $what (tests, eval, decode, train)"; exit 2 ;;
    esac
done
