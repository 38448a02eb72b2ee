"""A workspace of strings for driving the agent loop in the unit tier: the file tools work
on a dict, and `run` answers only the scripted experts' check command (`python -B -c "from
m import f; print(call)"`), evaluated in this process over the workspace's modules. No
process starts, so `run_episode` can be checked exactly without a sandbox."""

from __future__ import annotations

import builtins
import re
import types
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from fleetrl.envs.sandbox.base import Sandbox
from fleetrl.envs.sandbox.types import Change, ExecResult, Limits

_CHECK = re.compile(r'python -B -c "from (\w+) import (\w+); print\((.+)\)"')


def evaluate(files: Mapping[str, str], module: str, expression: str) -> Any:
    """`expression` in the namespace of `module`, whose imports resolve to `files` only."""
    loaded: dict[str, types.ModuleType] = {}

    def load(name: str, *args: Any, **kwargs: Any) -> types.ModuleType:
        if name not in loaded:
            loaded[name] = types.ModuleType(name)
            namespace = vars(loaded[name])
            namespace["__builtins__"] = {**vars(builtins), "__import__": load}
            exec(compile(files[f"{name}.py"], f"{name}.py", "exec"), namespace)
        return loaded[name]

    return eval(expression, vars(load(module)))


class MemorySandbox(Sandbox):
    """`files` as the workspace; commands other than the experts' check are refused."""

    backend, isolated, workdir = "memory", True, "/workspace"

    def __init__(self, files: Mapping[str, str]) -> None:
        self.files = dict(files)
        self.limits = Limits()
        self.commands: list[str] = []

    def exec(
        self,
        cmd: str | Sequence[str],
        timeout: float | None = None,
        env: Mapping[str, str] | None = None,
        *,
        pass_fds: Sequence[int] = (),
    ) -> ExecResult:
        self.commands.append(str(cmd))
        match = _CHECK.fullmatch(cmd) if isinstance(cmd, str) else None
        if match is None:
            raise AssertionError(f"a command the memory sandbox does not run: {cmd!r}")
        value = evaluate(self.files, match[1], match[3])
        return ExecResult(0, f"{value}\n", "", False, False, 0.0)

    def read_file(self, path: str, max_bytes: int | None = None) -> bytes:
        if path not in self.files:
            raise FileNotFoundError(path)
        return self.files[path].encode()

    def write_file(self, path: str, data: bytes | str, mode: int = 0o644) -> None:
        self.files[path] = data if isinstance(data, str) else data.decode()

    def list_dir(self, path: str = ".") -> list[str]:
        return sorted(self.files)

    def changes(self) -> list[Change]:
        return []

    def diff(self, paths: Iterable[str] | None = None) -> str:
        return ""

    def close(self) -> None:
        pass
