"""A task folder whose train split adds function shapes drawn at random to the suite's.

    python scripts/shape_tasks.py DIR [--shapes 600] [--base-train DIR2]
    fleetrl sft OUT --init BASE --set tasks.tasks_dir=DIR ...

DIR/tasks.jsonl holds, as its `train` split, `--shapes` tasks of new function shapes
(`fleetrl.envs.micro.shapes`: train constants and letters, the eight bug kinds cycled, no
shape within one line of a `heldout-templates` function) after the train tasks of
`--base-train` (a task folder, e.g. the positive control's) or of the bundled suite, then
the bundled `val`, `heldout` and `heldout-templates` tasks unchanged. New repositories are
written under DIR/repos. It tells whether a model that cannot memorise the lines it edits
learns to copy them, and so fixes functions of unseen shapes.
"""

import argparse
from pathlib import Path

from fleetrl.envs.micro import suite as micro
from fleetrl.envs.records import write_jsonl
from fleetrl.envs.suites import load_tasks

SEED = "fleetrl-micro-shapes-v1"


def main() -> None:
    """Write DIR/tasks.jsonl and DIR/repos."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", type=Path)
    parser.add_argument("--shapes", type=int, default=600)
    parser.add_argument("--base-train", type=Path, default=None)
    args = parser.parse_args()
    args.dir.mkdir(parents=True)
    if args.base_train is None:
        tasks = load_tasks(suite="micro", split="train")
    else:
        tasks = load_tasks(tasks_dir=args.base_train, split="train")
    tasks += micro.fresh_shape_tasks(args.shapes, SEED, "shape-train", args.dir / "repos")
    for split in ("val", "heldout", "heldout-templates"):
        tasks += load_tasks(suite="micro", split=split)
    write_jsonl(tasks, args.dir / "tasks.jsonl")
    print(f"{len(tasks)} tasks in {args.dir / 'tasks.jsonl'}")


if __name__ == "__main__":
    main()
