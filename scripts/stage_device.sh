#!/usr/bin/env bash
# The kit a call of the lent GPU carries (.device/kit), made by ../shared/tools/device-stage.sh with what this
# project adds to it. Run from the project root after scripts/setup.sh and scripts/setup_quantize.sh:
#
#   bash scripts/stage_device.sh
#   then, on the GPU machine (carrying .device/kit):
#     bash .device/kit/install.sh && . /tmp/np/env.sh && bash scripts/gpu_acceptance.sh ...
#
# 1. The shared tool, run from a copy whose wheel list also holds what the project imports and the GPU image lacks
#    (EXTRA below: text2num, the scorer's number words); the shared tool itself is read-only here.
# 2. llm-compressor, for scripts/gpu_acceptance.sh's gptq step. The image has llm-compressor's transformers pin and a
#    torch it takes; the kit carries the project's newer transformers. So llm-compressor and what it needs that the
#    image lacks go to .device/kit/quantize, and the kit's install.sh puts them, with the kit's other wheels (not its
#    transformers or peft), in /tmp/np/quantize, which NUMPREC_QUANTIZE_SITE names in /tmp/np/env.sh: harness.quantize
#    hands itself over to the image's Python over that site (harness/core/paths.py, quantize_command), as it hands
#    over to .venv-quantize here. Before it says done, the commands that run there are imported with only what the
#    image has and the two sites carry, as the shared tool's imagecheck does for the rest.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
kit=.device/kit
tools=$(realpath ../shared/tools)
py=.venv-quantize/bin/python
[ -x .venv/bin/python ] || { echo "no .venv: run bash scripts/setup.sh first"; exit 2; }
EXTRA=text2num  # the main environment's distributions the image lacks, carried at .venv's versions
copy=$(mktemp -d)
cp "$tools"/* "$copy"/
extra=$(for name in $EXTRA; do printf ' %s==$(pin %s)' "$name" "$name"; done)
sed -i "s/json-repair==\$(pin json-repair) loguru/&$extra/" "$copy/device-stage.sh"
grep -q "$EXTRA" "$copy/device-stage.sh" || { echo "../shared/tools/device-stage.sh changed: add $EXTRA by hand"; exit 4; }
code=0
bash "$copy/device-stage.sh" || code=$?
rm -rf "$copy"
# 3: the kit and the tree together are over a call; said again below, once llm-compressor is in the kit
[ $code = 0 ] || [ $code = 3 ] || exit $code
[ -f $kit/install.sh ] || { echo "the shared tool wrote no kit"; exit 2; }
[ -x $py ] || { echo "no .venv-quantize: run bash scripts/setup_quantize.sh first"; exit 2; }
pin() { $py -c "import importlib.metadata as m; print(m.version('$1'))"; }
image=$(awk '$1 == "transformers" {print $2}' "$tools/image-packages.txt")
if [ "$image" != "$(pin transformers)" ]; then
    echo "the GPU image's transformers is ${image:-missing}, llm-compressor's pin $(pin transformers): carry that one"
    exit 3
fi
rm -rf $kit/quantize && mkdir -p $kit/quantize
wanted=()
for name in llmcompressor auto-round datasets dill multiprocess; do  # those the kit has (for gptqmodel) once
    ls $kit/whl/"${name//-/_}"-*.whl > /dev/null 2>&1 || wanted+=("$name==$(pin "$name")")
done
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
    --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    -d $kit/quantize "${wanted[@]}" 2>&1 | grep -v Location || true
grep -q NUMPREC_QUANTIZE_SITE $kit/install.sh || cat >> $kit/install.sh <<'SH'
wheels=$(ls .device/kit/whl/*.whl | grep -v -e '/transformers-' -e '/peft-')
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/np/quantize $wheels \
    .device/kit/quantize/*.whl 2>&1 | grep -v WARNING || true
echo "export NUMPREC_QUANTIZE_SITE=/tmp/np/quantize" >> /tmp/np/env.sh
echo "llm-compressor's site: /tmp/np/quantize (NUMPREC_QUANTIZE_SITE)"
SH

# what runs in that site, imported here with what the image has and the sites carry (their wheels, side by side)
carried=$(mktemp -d)
trap 'rm -rf "$carried"' EXIT
for wheel in $kit/whl/*.whl $kit/quantize/*.whl; do
    case $(basename "$wheel") in transformers-* | peft-*) ;; *) ln -s "$(realpath "$wheel")" "$carried/" ;; esac
done
PYTHONDONTWRITEBYTECODE=1 $py - "$tools" "$carried" <<'PY' | grep '^imagecheck' || { echo "import check failed"; exit 5; }
import sys

sys.path.insert(0, sys.argv[1])
import imagecheck  # noqa: E402

# harness.quantize's worker and what it imports late (its calibration), and the bench that calls it
imagecheck.MODULES = ["harness.quantize", "harness.models.fp4", "datasets", "llmcompressor", "llmcompressor.modifiers.quantization", "compressed_tensors", "transformers", "bench.gptq"]
sys.exit(imagecheck.main(sys.argv[1] + "/image-packages.txt", sys.argv[2]))
PY
tree() { (git ls-files -z -- "$@"; git ls-files -z --others --exclude-standard -- "$@") | xargs -0 du -cm 2>/dev/null \
    | tail -1 | cut -f1; }
size=$(du -sm $kit | cut -f1) whole=$(tree .) bare=$(tree . ':!reports')
echo "staged llm-compressor $(pin llmcompressor) in $kit/quantize; kit ${size} MiB + tree ${whole} MiB of 64"
if [ $((size + whole)) -gt 62 ]; then
    [ $((size + bare)) -le 62 ] || { echo "kit ${size} MiB + tree without reports/ ${bare} MiB: too big for a call"; exit 3; }
    echo "for the call, move reports/ aside (mv reports ../reports.aside; afterwards mv ../reports.aside reports):" \
        "kit ${size} MiB + tree ${bare} MiB"
fi
