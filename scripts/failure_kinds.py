"""Why a checkpoint's episodes fail on a micro split: one episode per task, each sorted
into a kind by what its first edit_file call did.

    python scripts/failure_kinds.py CHECKPOINT [--split heldout] [--temperature 0]

Kinds: passed; passed after a refused edit (recovery); an edit applied but the fix is
wrong; a refused edit whose `old` text is the file's line with a different constant
(a number or a quoted letter: the model wrote the one it knows, not the one it read);
a refused edit with any other mismatch; no edit at all. Prints a JSON count per kind.
"""

import argparse
import asyncio
import difflib
import json
import re
import tempfile
from collections import Counter
from pathlib import Path

from fleetrl.config import load_config
from fleetrl.envs.micro.suite import materialise
from fleetrl.model.chat import parse_reply
from fleetrl.model.checkpoint import resolve_checkpoint
from fleetrl.rollout import evaluate
from fleetrl.types import SamplingParams, Task, Trajectory


def first_edit_old(trajectory: Trajectory, decode) -> str | None:
    """The `old` argument of the episode's first edit_file call, if it made one."""
    text = "".join(decode(segment.token_ids) for segment in trajectory.segments)
    for reply in text.split("<|im_start|>assistant")[1:]:
        for call in parse_reply(reply.split("<|im_end|>")[0]).tool_calls:
            if call.name == "edit_file":
                return str(call.arguments.get("old", ""))
    return None


def constants_blanked(line: str) -> str:
    """The line with every integer and every quoted single letter replaced by a marker."""
    return re.sub(r"'[a-z]'", "'L'", re.sub(r"\b\d+\b", "N", line.strip()))


def kind_of(task: Task, trajectory: Trajectory, decode) -> str:
    """The failure kind of one episode (see the module docstring)."""
    if trajectory.reward >= 1:
        return "passed after a refused edit" if trajectory.failed_edits else "passed"
    if not trajectory.failed_edits:
        has_edit = first_edit_old(trajectory, decode) is not None
        return "edit applied, wrong fix" if has_edit else "no edit"
    old = (first_edit_old(trajectory, decode) or "").strip().splitlines() or [""]
    with tempfile.TemporaryDirectory() as folder:
        materialise(task, Path(folder))
        source = "".join(p.read_text() for p in Path(folder).glob("*.py"))
    closest = max(
        source.splitlines(),
        key=lambda line: difflib.SequenceMatcher(None, line.strip(), old[0]).ratio(),
    )
    if constants_blanked(closest) == constants_blanked(old[0]):
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
    kinds: Counter[str] = Counter()

    # evaluate._in_session is the evaluator's own engine set-up (one checkpoint, one engine).
    async def work(session) -> None:
        session.rollouts.sampling = SamplingParams(temperature=args.temperature)
        decode = session.rollouts.tokenizer.decode

        async def one(task: Task) -> None:
            kinds[kind_of(task, await session.rollouts.run_one(task), decode)] += 1

        await asyncio.gather(*map(one, tasks))

    evaluate._in_session(resolve_checkpoint(args.checkpoint), config, work, progress=False)
    print(json.dumps(dict(kinds.most_common()), indent=1))


if __name__ == "__main__":
    main()
