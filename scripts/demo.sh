#!/usr/bin/env bash
# `make demo`: the main job on the shipped `demo` preset (fleetrl/configs/demo.toml): RL from the
# shipped `base-slip` model on the bundled `product` suite with guided groups, a local
# object store, bubblewrap sandboxes and the asynchronous pipeline; it evaluates the base
# and the trained model on the held-out split, each at its own temperature chosen on the
# validation split, and writes runs/demo-TIME/ with report.html. Extra arguments go to
# `fleetrl train`, e.g. `make demo ARGS="--set trainer.bf16=false"` (the float32 path).
set -euo pipefail
cd "$(dirname "$0")/.."
NAME=${NAME:-demo-$(date +%Y%m%d-%H%M%S)}
.venv/bin/fleetrl train demo --name "$NAME" "$@"
echo
echo "held-out pass@1 before and after, each at its temperature chosen on val (runs/$NAME/eval.json):"
.venv/bin/python - "runs/$NAME/eval.json" <<'PY'
import json, sys
from fleetrl.rollout.stats import paired_gain, task_rates
summary = json.load(open(sys.argv[1]))
for label, r in summary.items():
    print(f"  {label:5s} {r['pass_at_1']:.3f}  95% CI [{r['ci_low']:.3f}, {r['ci_high']:.3f}]"
          f"  at T = {r['temperature']:g}, {r['episodes']} episodes on {r['tasks']} tasks")
if {"base", "final"} <= set(summary):
    gain, low, high = paired_gain(task_rates(summary["final"]), task_rates(summary["base"]))
    print(f"  gain  {100 * gain:+.1f} points  95% CI [{100 * low:+.1f}, {100 * high:+.1f}],"
          f" paired over the same {summary['final']['tasks']} tasks")
PY
echo "report: runs/$NAME/report.html"
