#!/usr/bin/env bash
# The checks that need a GPU (issue 46), for a session lent one: run from the repository
# root on the device, `bash scripts/gpu_check.sh OUT_DIR` (under 8 minutes). Each step
# writes its figures into OUT_DIR; a step whose package is missing says so and the rest
# go on. Carry the pure-Python dependencies torch lacks there (pydantic, fastapi, uvicorn,
# zstandard, tomli-w: .library/device/README.md). The lent machines have CUDA torch but no vLLM (a CUDA vLLM wheel is far
# above what a call may carry), so the vLLM steps run only where vLLM is installed.
#   1. the trainer on CUDA: a tiny dense and MoE train step, bf16 autocast, logprobs vs a
#      float32 forward (tests/unit/trainer, on the GPU);
#   2. the built-in engine on CUDA: bench engine (tokens/s, swap pause);
#   3. bench mismatch, fleetrl engine, float32 and bfloat16 serving, dense base;
#   4. with vLLM: its engine tests on CUDA (routes returned for MoE) and the vLLM arms.
set -uo pipefail
OUT=${1:-gpu-out}
mkdir -p "$OUT"
PY=${PY:-python3}
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} PYTHONUNBUFFERED=1
"$PY" -c "import torch; assert torch.cuda.is_available(); print(torch.cuda.get_device_name())" \
  | tee "$OUT/device.txt" || { echo "no CUDA device" >&2; exit 1; }
step() { echo "== $1"; shift; timeout 240 "$@" > "$OUT/$STEP.log" 2>&1; echo "rc=$?" >> "$OUT/$STEP.log"; tail -3 "$OUT/$STEP.log"; }
STEP=trainer step "trainer on CUDA" "$PY" -m pytest -q -x -p no:cacheprovider tests/unit/trainer/test_loss.py
STEP=engine step "bench engine" "$PY" -m fleetrl.cli bench engine --json --rounds 1 --threads 4
STEP=mismatch step "bench mismatch" "$PY" -m fleetrl.cli bench mismatch --engine fleetrl --tasks 8 --json
if "$PY" -c "import vllm" 2>/dev/null; then
  STEP=vllm-tests step "vLLM engine tests" "$PY" -m pytest -q -x -p no:cacheprovider tests/integration/inference/test_vllm_engine.py
  STEP=vllm-mismatch step "bench mismatch, vLLM" "$PY" -m fleetrl.cli bench mismatch --engine vllm --tasks 8 --json
else
  echo "vLLM is not installed here: its steps are skipped" | tee "$OUT/vllm-skipped.txt"
fi
