#!/usr/bin/env bash
# The GPU acceptance (../shared/notes/gpu.md) in one call of the lent device, each step under its own time limit,
# its figures and their goals written to $OUT/results.json as each step ends (bench/acceptance.py), every log in
# $OUT/logs.tgz: two files in all, so that a call that is cut short still brings back what it measured.
#
#   on the device, from the checkout (staged with ../shared/tools/device-stage.sh, carrying .device/kit):
#     bash .device/kit/install.sh && bash scripts/gpu_acceptance.sh all
#   here, the same steps on this CPU at tiny shapes (the suite runs it: a broken path, import or flag fails here):
#     bash scripts/gpu_acceptance.sh --cpu all
#
#   awq      the AWQ int4 kernel built ahead (harness.awq_kernels --build), first: nothing loads AWQ before   (240 s)
#   tests    pytest -m gpu and the CUDA-touching tests of the backend, the AWQ kernels, scratch, the bench  (150 s)
#   decode   the 8B architecture (random, bf16) at 256 rows: the quick grid's batch against generate() and
#            the roofline, one cell's batch against its bounds (weights and KV read), the first compile apart (190 s)
#   fp8      the 8B architecture at 256 rows, bf16 against its fp8-dynamic rounding on FP8 tensor cores
#            (torch._scaled_mm), and those answers against compressed-tensors' emulation (issue 50)        (150 s)
#   train    scratch's packed step, one shape per precision, alone and packed, over one data pool           (150 s)
#
# The limits come from the last call's measurements (Marlin's build: over 150 s; the 8B decode: 39 s compiling,
# then ~2 s a call), with room: about 14 minutes in all at most, 10 when every step ends as measured; fp8 has
# not run on a GPU yet (its limit is a guess: a minute to build the model, three compiles of 39 s).
set -uo pipefail
cd "$(dirname "$0")/.."
device=cuda
if [ "${1:-}" = --cpu ]; then device=cpu; shift; fi
[ "${1:-}" = all ] && set -- awq tests decode fp8 train
out=$(realpath -m "${OUT:-gpu-out}")
logs=$(mktemp -d)
mkdir -p "$out"
trap 'rm -rf "$logs"' EXIT
# What ../shared/tools/device-stage.sh staged: its site folder and environment, the default model's tokenizer.
[ -f /tmp/np/env.sh ] && . /tmp/np/env.sh
[ -d /tmp/np/tokenizer ] && export NUMPREC_TOKENIZER_DIR=/tmp/np/tokenizer
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD"
python=${PYTHON:-python3}
[ -x .venv/bin/python ] && [ "$device" = cpu ] && python=.venv/bin/python

step() {  # name, seconds, command...: run under its limit, log, then its figures into results.json
    local name=$1 limit=$2; shift 2
    echo "=== $name ($(date +%T), limit ${limit}s): $*" | tee -a "$logs/steps.log"
    local started=$SECONDS
    timeout --kill-after=10 "$limit" "$@" > "$logs/$name.log" 2>&1
    local rc=$?
    echo "=== $name rc=$rc in $((SECONDS - started))s" | tee -a "$logs/steps.log"
    tail -n 15 "$logs/$name.log"
    "$python" -m bench.acceptance --out "$out" --logs "$logs" --step "$name" --rc "$rc" \
        --seconds $((SECONDS - started)) --device "$device" >> "$logs/steps.log" 2>&1
    tar -czf "$out/logs.tgz" -C "$logs" . 2>/dev/null
}

if [ "$device" = cuda ]; then
    nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader >> "$logs/steps.log" 2>&1
    tests=(tests/harness/backends/test_backend.py tests/harness/backends/test_static_decode.py tests/harness/models/test_autoawq.py
           tests/scratch tests/bench/test_decode.py)
    rows=256
else
    tests=(-m gpu tests/harness/backends/test_backend.py tests/harness/models/test_autoawq.py tests/bench/test_decode.py)
    rows=8
fi
for what in "$@"; do
    case $what in
    awq)
        step awq "${AWQ_SECONDS:-240}" "$python" -m harness.awq_kernels --build ;;
    tests)
        step tests "${TESTS_SECONDS:-150}" "$python" -m pytest -q --no-header -p no:cacheprovider -n 0 \
            -o faulthandler_timeout=120 --junitxml="$logs/tests.xml" "${tests[@]}" ;;
    decode)
        section=eval; [ "$device" = cpu ] && section=loop
        step decode "${DECODE_SECONDS:-190}" "$python" -m bench.run --only "$section" --device "$device" \
            --repeats 2 --batch-size "$rows" --out "$logs/bench-decode" ;;
    fp8)
        step fp8 "${FP8_SECONDS:-150}" "$python" -m bench.run --only fp8 --device "$device" --repeats 1 \
            --batch-size "$rows" --out "$logs/bench-fp8" ;;
    train)
        step train "${TRAIN_SECONDS:-150}" "$python" -m bench.run --only train --device "$device" --quick \
            --repeats 1 --out "$logs/bench-train" ;;
    *) echo "unknown step $what (all, awq, tests, decode, fp8, train)"; exit 2 ;;
    esac
done
