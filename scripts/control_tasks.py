"""A task folder for the held-out ceiling's positive control: train tasks that draw the
evaluation splits' constants and letters.

    python scripts/control_tasks.py DIR [--size 440]
    fleetrl bench learning --name control --set tasks.tasks_dir=DIR

DIR/tasks.jsonl holds `--size` new micro instances as its `train` split (templates and bug
kinds cycled as in the suite, fresh function names, every template integer 3 mod 4 and
every template letter from HELDOUT_LETTERS: the symbols only evaluation tasks use in the
bundled suite), and the bundled `val`, `heldout` and `heldout-templates` tasks unchanged.
The new tasks' repositories are written under DIR/repos. With it, RL and SFT-more both
train on tasks that ask for the evaluation symbols (instances stay unseen), so the bench
tells whether the ceiling of `docs/log/2026-12-01-ceiling.md` is the split's or the trainer's.
At the default size these are the train tasks of the bundled `product` suite (the same
draw, ids `control-train-*` here and `product-train-*` there): `--set tasks.suite=product`
needs no folder.
"""

import argparse
from pathlib import Path

from lab.folders import fresh_train_tasks, write_micro_folder

from fleetrl.envs.micro import suite as micro


def main() -> None:
    """Write DIR/tasks.jsonl and DIR/repos."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dir", type=Path, help="the task folder to write (must not exist)")
    parser.add_argument("--size", type=int, default=440, help="train tasks to draw")
    args = parser.parse_args()
    if args.dir.exists():
        parser.error(f"{args.dir} exists: give a folder that does not exist yet")
    args.dir = args.dir.resolve()  # task records hold absolute repository paths
    args.dir.mkdir(parents=True)
    # Drawn as `val` tasks (evaluation constants and letters), filed as `train`.
    tasks = fresh_train_tasks(
        args.size, "val", micro.PRODUCT_SEED, "control-train", args.dir / "repos"
    )
    path = write_micro_folder(tasks, args.dir)
    print(f"{len(tasks)} train tasks and the bundled evaluation splits in {path}")


if __name__ == "__main__":
    main()
