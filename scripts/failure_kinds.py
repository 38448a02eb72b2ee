"""Why a checkpoint's episodes fail on a micro split: one episode per task, each sorted
into a kind by its edit_file calls (the first one the tool refused, if any).

    python scripts/failure_kinds.py CHECKPOINT [--split heldout] [--temperature 0]

Kinds: passed; passed after a refused edit (recovery); passed after a second applied
edit (a wrong fix mended, as the expert's `retry` plan shows); an edit applied but the fix
is wrong; a refused edit whose `old` text is the file's line with a different constant
(a number or a quoted letter: the model wrote the one it knows, not the one it read);
a refused edit with any other mismatch; no edit at all. Prints a JSON count per kind,
and the tasks passed among those whose fix line holds a template constant (a number or
letter the suite draws per split, which the model must copy from the file) and the rest.
"""

import argparse
import difflib
import json
import re
import tempfile
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from fleetrl.config_files import load_config
from fleetrl.envs.micro.gold import gold_change
from fleetrl.envs.micro.suite import constants_of, materialise
from fleetrl.model.chat import parse_reply
from fleetrl.model.checkpoint import CheckpointError, read_config, resolve_checkpoint
from fleetrl.model.tokenizer import Tokenizer
from fleetrl.rollout import evaluate
from fleetrl.types import Task, Trajectory


def edit_olds(trajectory: Trajectory, decode: Callable[[list[int]], str]) -> list[str]:
    """The `old` argument of each edit_file call of the episode, in order."""
    text = "".join(decode(segment.token_ids) for segment in trajectory.segments)
    calls = (
        call
        for reply in text.split("<|im_start|>assistant")[1:]
        for call in parse_reply(reply.split("<|im_end|>")[0]).tool_calls
    )
    return [str(call.arguments.get("old", "")) for call in calls if call.name == "edit_file"]


def constants_blanked(line: str) -> str:
    """The line with every integer and every quoted single letter replaced by a marker."""
    return re.sub(r"'[a-z]'", "'L'", re.sub(r"\b\d+\b", "N", line.strip()))


def fix_holds_constant(task: Task) -> bool:
    """Whether a line the gold fix replaces or writes holds one of the task's template
    constants: an integer as a whole number, a letter inside a quoted string."""
    change = gold_change(task.patch)
    text = "\n".join(change.old + change.new)
    for value in constants_of(task).values():
        if isinstance(value, int) and re.search(rf"(?<![\w.]){value}(?!\w)", text):
            return True
        if isinstance(value, str) and re.search(rf"'[a-z]*[{value}][a-z]*'", text):
            return True
    return False


def kind_of(task: Task, trajectory: Trajectory, decode: Callable[[list[int]], str]) -> str:
    """The failure kind of one episode (see the module docstring)."""
    olds = edit_olds(trajectory, decode)
    if trajectory.reward >= 1:
        if trajectory.failed_edits:
            return "passed after a refused edit"
        return "passed after a second applied edit" if len(olds) >= 2 else "passed"
    if not trajectory.failed_edits:
        return "edit applied, wrong fix" if olds else "no edit"
    with tempfile.TemporaryDirectory() as folder:
        materialise(task, Path(folder))
        source = "".join(p.read_text() for p in Path(folder).glob("*.py"))
    # The refused edit: the first `old` that is not in the file as it was given; in it,
    # the first line that is not a line of the file.
    refused = next((old for old in olds if old not in source), "")
    lines = {line.strip() for line in source.splitlines()}
    wrong = next((line.strip() for line in refused.splitlines() if line.strip() not in lines), "")
    closest = max(lines, key=lambda line: difflib.SequenceMatcher(None, line, wrong).ratio())
    if wrong and constants_blanked(closest) == constants_blanked(wrong):
        return "refused edit: old mis-copies a constant"
    return "refused edit: other mismatch"


def main() -> None:
    """Run the episodes and print the count per kind."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("checkpoint")
    parser.add_argument("--split", default="heldout")
    parser.add_argument("--temperature", type=float, default=0.0)
    args = parser.parse_args()
    config = load_config(None)
    tasks = evaluate.split_tasks(config, args.split)
    checkpoint = resolve_checkpoint(args.checkpoint)
    try:
        read_config(checkpoint)
    except CheckpointError as err:
        parser.error(str(err))
    trajectories = evaluate.episodes_of(checkpoint, config, tasks, args.temperature)
    decode = Tokenizer.from_pretrained(checkpoint).decode
    pairs = list(zip(tasks, trajectories, strict=True))
    kinds = Counter(kind_of(t, e, decode) for t, e in pairs)
    lines = ["holds a template constant" if fix_holds_constant(t) else "no constant" for t in tasks]
    won = Counter(line for line, (_, e) in zip(lines, pairs, strict=True) if e.reward >= 1)
    passed = {line: f"{won[line]} of {total}" for line, total in Counter(lines).items()}
    print(json.dumps({"kinds": dict(kinds.most_common()), "passed, by fix line": passed}, indent=1))


if __name__ == "__main__":
    main()
