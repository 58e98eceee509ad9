#!/usr/bin/env bash
# The GPU acceptance (../shared/notes/gpu.md) planned into one call of the lent device: at most 600 s a command, the
# machine's start included (--budget, default 560 s, is what the steps may take). Steps run in order of value, each
# under the limit its measured or estimated time gives it (bench/plan.py); a step that does not fit what is left is
# skipped, its reason said and recorded. Figures and goals go to $OUT/results.json as each step ends
# (bench/acceptance.py), every log to $OUT/logs.tgz: two files, so that a call cut short brings back what it measured.
#
#   on the device, from the checkout (staged with scripts/stage_device.sh, carrying .device/kit):
#     bash .device/kit/install.sh && bash scripts/gpu_acceptance.sh --budget 560 all
#   here, the same steps on this CPU at tiny shapes (the suite runs it: a broken path, import or flag fails here):
#     bash scripts/gpu_acceptance.sh --cpu all
#
#   awq      the AWQ int4 kernel built ahead (harness.awq_kernels --build), in the background and niced from the
#            call's start, beside the decode step; the tests step waits for it                                 (240 s)
#   decode   the 8B architecture (random, bf16) at 256 rows: the quick grid's batch against generate() and
#            the roofline, one cell's batch against its bounds (weights and KV read), the first compile apart (190 s)
#   tests    pytest -m gpu and the CUDA-touching tests of the backend, the AWQ kernels, scratch, the bench  (150 s)
#   fp8      the 8B architecture at 256 rows, bf16 against its fp8-dynamic rounding on FP8 tensor cores
#            (torch._scaled_mm), and those answers against compressed-tensors' emulation (issue 50)        (150 s)
#   sensitivity  harness.sensitivity's table (every layer group scored two ways, one pass each) on the 8B
#            architecture, random, bf16 against its fp8-dynamic rounding, 64 problems; each phase timed      (150 s)
#   train    scratch's packed step, one shape per precision, alone and packed, over one data pool; written after
#            every pack                                                                                     (150 s)
#   gptq     harness.quantize --precision nvfp4+gptq on the 8B architecture's first 8 blocks (random, bf16),
#            128 calibration problems, in llm-compressor's site (scripts/stage_device.sh)                   (240 s)
#   deploy   a small random model made nvfp4+gptq, evaluated with harness.eval --backend vllm: each layer's loaded
#            scheme checked (the GPU image has no vLLM today: the step records the line that says so)      (150 s)
#
# `all` is more than one call holds: the script prints the calls it needs (python -m bench.plan --calls) and runs the
# first; the next is the command printed for call 2.
set -uo pipefail
cd "$(dirname "$0")/.."
device=cuda budget=560
while [ $# -gt 0 ]; do
    case $1 in
    --cpu) device=cpu; shift ;;
    --budget) budget=$2; shift 2 ;;
    *) break ;;
    esac
done
out=$(realpath -m "${OUT:-gpu-out}")
logs=$(mktemp -d)
mkdir -p "$out"
trap 'rm -rf "$logs"' EXIT
# What scripts/stage_device.sh staged: its site folders and environment, the default model's tokenizer.
[ -f /tmp/np/env.sh ] && . /tmp/np/env.sh
[ -d /tmp/np/tokenizer ] && export NUMPREC_TOKENIZER_DIR=/tmp/np/tokenizer
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1 PYTHONPATH="${PYTHONPATH:+$PYTHONPATH:}$PWD"
python=${PYTHON:-python3}
[ -x .venv/bin/python ] && [ "$device" = cpu ] && python=.venv/bin/python

if [ "${1:-}" = all ]; then
    set -- awq decode tests fp8 sensitivity train gptq deploy
    echo "=== all the steps need these calls of ${budget} s:" | tee -a "$logs/steps.log"
    "$python" -m bench.plan --calls --budget "$budget" "$@" | tee -a "$logs/steps.log"
fi

record() {  # results.json and logs.tgz, one writer at a time (the background step writes too)
    flock "$logs/.lock" "$python" -m bench.acceptance --out "$out" --logs "$logs" --device "$device" "$@" \
        >> "$logs/steps.log" 2>&1
    flock "$logs/.lock" tar -czf "$out/logs.tgz" -C "$logs" --exclude=.lock . 2>/dev/null
}

step() {  # name, seconds, command...: run under its limit, log, then its figures into results.json
    local name=$1 limit=$2; shift 2
    echo "=== $name ($(date +%T), limit ${limit}s): $*" | tee -a "$logs/steps.log"
    local started=$SECONDS
    timeout --kill-after=10 "$limit" "$@" > "$logs/$name.log" 2>&1
    local rc=$?
    echo "=== $name rc=$rc in $((SECONDS - started))s" | tee -a "$logs/steps.log"
    tail -n 15 "$logs/$name.log"
    record --step "$name" --rc "$rc" --seconds $((SECONDS - started))
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
command_of() {  # a step's command
    case $1 in
    awq) echo "$python" -m harness.awq_kernels --build ;;
    decode)
        local section=eval; [ "$device" = cpu ] && section=loop
        echo "$python" -m bench.run --only "$section" --device "$device" --repeats 2 --batch-size "$rows" \
            --out "$logs/bench-decode" ;;
    fp8) echo "$python" -m bench.run --only fp8 --device "$device" --repeats 1 --batch-size "$rows" --out "$logs/bench-fp8" ;;
    sensitivity)
        local problems=64; [ "$device" = cpu ] && problems=8
        echo "$python" -m bench.run --only sensitivity --device "$device" --problems "$problems" \
            --out "$logs/bench-sensitivity" ;;
    train) echo "$python" -m bench.run --only train --device "$device" --quick --repeats 1 --out "$logs/bench-train" ;;
    gptq)
        local problems=128; [ "$device" = cpu ] && problems=8
        echo "$python" -m bench.run --only gptq --device "$device" --problems "$problems" --out "$logs/bench-gptq" ;;
    deploy) echo "$python" -m bench.run --only deploy --device "$device" --problems 8 --out "$logs/bench-deploy" ;;
    esac
}

declare -A background=()
plan=$("$python" -m bench.plan --budget "$budget" "$@") || exit 2
while read -r action name detail; do
    limit_var="${name^^}_SECONDS"
    limit=${!limit_var:-$detail}
    case $action in
    background)
        echo "=== $name starts in the background ($(date +%T)), niced" | tee -a "$logs/steps.log"
        # shellcheck disable=SC2046
        step "$name" "$limit" nice -n 10 $(command_of "$name") &
        background[$name]=$! ;;
    wait)
        echo "=== waiting for $name" | tee -a "$logs/steps.log"
        wait "${background[$name]}"; unset "background[$name]" ;;
    run)
        if [ "$name" = tests ]; then
            step tests "$limit" "$python" -m pytest -q --no-header -p no:cacheprovider -n 0 \
                -o faulthandler_timeout=120 --junitxml="$logs/tests.xml" "${tests[@]}"
        else
            # shellcheck disable=SC2046
            step "$name" "$limit" $(command_of "$name")
        fi ;;
    skip)
        echo "=== $name skipped: $detail" | tee -a "$logs/steps.log"
        record --step "$name" --skipped "$detail" ;;
    esac
done <<< "$plan"
wait
