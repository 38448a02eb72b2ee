"""A recorder's sessions on disk, so that a serving process that dies loses none of them.

    turn committed   ─▶ SESSION.json rewritten whole (written aside, then renamed)
    reward           ─▶ SESSION.json with its reward and task: it must still be sent
    group in the run ─▶ the group's SESSION.json files removed
    start-up         ─▶ every SESSION.json read back: sessions still recording go on
                        (their next turn, their feedback), rewarded ones are sent again

One JSON file per session in the journal's folder (a serving process's work folder). A
process killed between a group's write into the run and the removal of its files sends that
group again at its next start: at least once, never lost. Times are kept as unix times (the
recorder's own clock is monotonic, which means nothing to the next process).
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from fleetrl.model.chat import Message, ToolCall
from fleetrl.types import Segment

log = logging.getLogger(__name__)


class SessionJournal:
    """The sessions of one recorder, one file each, in `folder`."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        folder.mkdir(parents=True, exist_ok=True)

    def save(self, state: dict[str, Any]) -> None:
        """Keep one session's state (`SessionRecorder` makes it), replacing the last."""
        path = self._path(state["id"])
        partial = path.with_suffix(".tmp")
        partial.write_text(json.dumps(state))
        os.replace(partial, path)

    def remove(self, session_ids: list[str]) -> None:
        """Forget these sessions (sent, or expired)."""
        for session_id in session_ids:
            self._path(session_id).unlink(missing_ok=True)

    def load(self) -> list[dict[str, Any]]:
        """Every session kept, as saved (a file that cannot be read is logged and skipped)."""
        states = []
        for path in sorted(self.folder.glob("*.json")):
            try:
                states.append(json.loads(path.read_text()))
            except (OSError, ValueError) as err:
                log.warning("journal %s unreadable, skipped: %s", path, err)
        return states

    def _path(self, session_id: str) -> Path:
        return self.folder / f"{session_id.encode().hex()}.json"  # any id, a safe name


def encode_recording(segment: Segment, history: list[Message], tools: Any) -> dict[str, Any]:
    """One segment of a session and the messages it renders, as JSON."""
    return {"segment": asdict(segment), "history": [asdict(m) for m in history], "tools": tools}


def decode_recording(raw: dict[str, Any]) -> tuple[Segment, list[Message], Any]:
    """A segment, its messages and its tools back from `encode_recording`."""
    history = [
        Message(
            m["role"], m["content"], [ToolCall(c["name"], c["arguments"]) for c in m["tool_calls"]]
        )
        for m in raw["history"]
    ]
    return Segment(**raw["segment"]), history, raw["tools"]


def wall_time(clock_value: float, clock_now: float) -> float:
    """The unix time of a reading of a recorder's clock, given the clock's reading now."""
    return time.time() - (clock_now - clock_value)


def clock_time(unix_time: float, clock_now: float) -> float:
    """A unix time as a reading of a recorder's clock, given the clock's reading now."""
    return clock_now - (time.time() - unix_time)
