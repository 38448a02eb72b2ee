"""A task folder whose train split adds function shapes drawn at random to the suite's.

    python scripts/shape_tasks.py DIR [--shapes 600] [--base-train DIR2] [--heldout-shapes 80]
        [--eval-symbols] [--open-lines 0.7]
    fleetrl sft OUT --init BASE --set tasks.tasks_dir=DIR ...
    fleetrl eval OUT --tasks DIR --split heldout-shapes --best-temperature

DIR/tasks.jsonl holds, as its `train` split, `--shapes` tasks of new function shapes
(`scripts/lab/shapes.py`: the eight bug kinds cycled, no shape within one line of a
`heldout-templates` function; train constants and letters, or with `--eval-symbols` the
evaluation ones, a product's conventions the base never trained on, as in the positive
control; with `--open-lines P` each expression line of a train shape is, with probability
P, widened by a random sub-expression, so that few lines repeat from shape to shape) after
the train tasks of `--base-train` (a task folder, e.g. the positive control's) or of the
bundled suite, then `--heldout-shapes` tasks of shapes no train task has, with the
evaluation constants and letters, as split `heldout-shapes`, and the bundled `val`,
`heldout` and `heldout-templates` tasks unchanged. New repositories are written
under DIR/repos. It tells whether a model that cannot memorise the lines it edits learns
to copy them, and so fixes functions of unseen shapes: of the grammar it trained on
(`heldout-shapes`), or written by hand (`heldout-templates`).
"""

import argparse
from pathlib import Path

from lab.folders import write_micro_folder
from lab.shapes import fresh_shape_tasks

from fleetrl.envs.tasks.records import TaskError
from fleetrl.envs.tasks.suites import load_tasks

SEED = "fleetrl-micro-shapes-v1"


def main() -> None:
    """Write DIR/tasks.jsonl and DIR/repos."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", type=Path, help="the task folder to write (must not exist)")
    parser.add_argument("--shapes", type=int, default=600, help="shape tasks added to train")
    parser.add_argument(
        "--base-train", type=Path, help="take the train split of this task folder, not the suite's"
    )
    parser.add_argument(
        "--heldout-shapes", type=int, default=0, help="tasks of unseen shapes for evaluation"
    )
    parser.add_argument(
        "--eval-symbols",
        action="store_true",
        help="train shapes draw the evaluation constants and letters (a product's conventions)",
    )
    parser.add_argument(
        "--open-lines",
        type=float,
        default=0.0,
        help="probability that a train shape's expression line is widened at random (0 to 1)",
    )
    args = parser.parse_args()
    if not 0.0 <= args.open_lines <= 1.0:
        parser.error(f"--open-lines: {args.open_lines} is not a probability between 0 and 1")
    if args.dir.exists():
        parser.error(f"{args.dir} exists: give a folder that does not exist yet")
    try:
        if args.base_train is None:
            tasks = load_tasks(suite="micro", split="train")
        else:
            tasks = load_tasks(tasks_dir=args.base_train, split="train")
    except TaskError as err:
        parser.error(f"--base-train: {err}")
    args.dir = args.dir.resolve()  # task records hold absolute repository paths
    args.dir.mkdir(parents=True)
    shapes = fresh_shape_tasks(
        args.shapes, SEED, "shape-train", args.dir / "repos",
        draw_as="val" if args.eval_symbols else None, open_lines=args.open_lines,
    )  # fmt: skip
    tasks += shapes
    if args.heldout_shapes:
        seen = frozenset(task.origin for task in shapes)
        tasks += fresh_shape_tasks(
            args.heldout_shapes, f"{SEED}-heldout", "shape-heldout", args.dir / "repos",
            split="heldout-shapes", avoid=seen,
        )  # fmt: skip
    path = write_micro_folder(tasks, args.dir)
    print(f"{len(tasks)} tasks and the bundled evaluation splits in {path}")


if __name__ == "__main__":
    main()
