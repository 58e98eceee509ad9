#!/usr/bin/env bash
# The GPU acceptance (shared/notes/gpu.md) in one call of the lent device: about nine minutes in all, each step
# under its own time limit and logged under $OUT (or ./gpu-out), so that one call brings back every finding it can.
#
#   bash scripts/gpu_acceptance.sh all                 # every step below, in this order
#   bash scripts/gpu_acceptance.sh decode awq          # some of them
#
#   tests    pytest -m gpu, and the CUDA-touching tests of the backend, the AWQ kernels and scratch   (100 s)
#   decode   the 8B architecture (random, bf16): one cell's batch against its bounds, the quick grid's
#            mixed batch against generate(), the first compile apart, the host read every k steps     (170 s)
#   awq      the AWQ kernel built ahead (python -m harness.awq_kernels --build, timed), then a small
#            AutoAWQ checkpoint loaded on it: the start's seconds and the kernel named               (130 s)
#   train    scratch's packed step, one shape per precision, alone and packed (bench.run --quick)     (160 s)
#
# Staged with ../shared/tools/device-stage.sh; a step that fails is logged and the next one runs anyway.
set -uo pipefail
cd "$(dirname "$0")/.."
out=${OUT:-gpu-out}
mkdir -p "$out"
export PYTHONPATH=$HOME/np/site:$PWD HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
step() {  # name, seconds, command...
    local name=$1 limit=$2; shift 2
    echo "=== $name ($(date +%T), limit ${limit}s): $*" | tee -a "$out/steps.log"
    local started=$SECONDS
    timeout --kill-after=10 "$limit" "$@" > "$out/$name.log" 2>&1
    local rc=$?
    echo "=== $name rc=$rc in $((SECONDS - started))s ($(date +%T))" | tee -a "$out/steps.log"
    tail -n 25 "$out/$name.log"
}
[ "${1:-}" = all ] && set -- tests decode awq train
for what in "$@"; do
    case $what in
    tests)
        nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | tee -a "$out/steps.log"
        python3 -c "import torch, transformers; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'transformers', transformers.__version__)" | tee -a "$out/steps.log"
        step pytest-gpu "${GPU_TEST_SECONDS:-100}" python3 -m pytest -q --no-header -p no:cacheprovider -n 0 \
            -o faulthandler_timeout=90 -m gpu tests/harness/test_backend.py tests/scratch tests/harness/test_autoawq.py \
            tests/bench/test_decode.py
        ;;
    decode)
        step bench-decode "${DECODE_SECONDS:-170}" python3 -m bench.run --only eval --device cuda --repeats 2 \
            --out "$out/bench-decode"
        ;;
    awq)
        step awq-build "${AWQ_BUILD_SECONDS:-100}" python3 -m harness.awq_kernels --build
        step awq-start "${AWQ_START_SECONDS:-30}" python3 -m pytest -q --no-header -p no:cacheprovider -n 0 \
            --durations=5 tests/harness/test_autoawq.py -k on_cuda
        ;;
    train)
        step bench-train "${TRAIN_SECONDS:-160}" python3 -m bench.run --only train --device cuda --quick --repeats 2 \
            --out "$out/bench-train"
        ;;
    *) echo "unknown step $what (all, tests, decode, awq, train)"; exit 2 ;;
    esac
done
tar -czf "$out/logs.tgz" -C "$out" --exclude logs.tgz . 2>/dev/null
