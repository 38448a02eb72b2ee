"""Grading time of the gold patch, old verifier vs new, interleaved in one run.

    python scripts/bench_grading.py OLD_REPO NEW_REPO [reps]   (e.g. OLD_REPO: a clone at an
    older commit; both checkouts need the task cache, which they share)

Each side is a worker process importing fleetrl from its own checkout (PYTHONPATH); the
parent sends the same workspaces to both in turn, so load changes hit both alike. Every
grading is a real one (a fresh outcome cache each time).
"""

import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

WORKER = r"""
import json, sys, time
from pathlib import Path
from fleetrl.envs import verifier
from fleetrl.envs.tasks.suites import get_task
try:
    import fleetrl.envs.verifier.cache as outcomes
except ModuleNotFoundError:  # a checkout from before the verifier became a package
    outcomes = verifier
for line in sys.stdin:
    task_id, ws = json.loads(line)
    outcomes.OUTCOMES = outcomes.OutcomeCache()
    start = time.monotonic()
    result = verifier.verify_workspace(get_task(task_id), Path(ws))
    print(json.dumps([time.monotonic() - start, result.reward]), flush=True)
"""


def main() -> None:
    old, new, reps = sys.argv[1], sys.argv[2], int(sys.argv[3]) if len(sys.argv) > 3 else 1
    from fleetrl.envs.tasks.git import apply_patch
    from fleetrl.envs.tasks.suites import load_tasks
    from fleetrl.envs.tasks.workspace import checkout

    tasks = load_tasks(suite="micro")[::27]
    root = Path(tempfile.mkdtemp(prefix="bench-grading-"))
    spaces = []
    for task in tasks:
        ws = checkout(task, root / task.instance_id)
        apply_patch(ws, task.patch)
        spaces.append((task.instance_id, str(ws)))
    workers = {
        name: subprocess.Popen(
            [sys.executable, "-c", WORKER],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "PYTHONPATH": repo},
            cwd=repo,
        )
        for name, repo in (("old", old), ("new", new))
    }
    times: dict[str, list[float]] = {"old": [], "new": []}
    for rep in range(reps + 1):  # the first round warms caches and is not counted
        for space in spaces:
            for name, proc in list(workers.items()) if rep % 2 else list(workers.items())[::-1]:
                proc.stdin.write(json.dumps(space) + "\n")
                proc.stdin.flush()
                took, reward = json.loads(proc.stdout.readline())
                assert reward == 1.0, (name, space)
                if rep:
                    times[name].append(took)
    for proc in workers.values():
        proc.stdin.close()
        proc.wait()
    for name, values in times.items():
        q = statistics.quantiles(values, n=10)
        print(
            f"{name}: p50 {statistics.median(values):.3f} s  p10 {q[0]:.3f}  p90 {q[-1]:.3f}"
            f"  n={len(values)}"
        )


if __name__ == "__main__":
    main()
