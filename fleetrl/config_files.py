"""Run configurations as files: TOML in, overrides on top, the resolved tree out.

    fleetrl train [CONFIG | PRESET] --set trainer.lr=1e-5
        ─▶ load_config: the file (or a shipped preset by name), the overrides merged in,
           validated into a `fleetrl.config.RunConfig` (errors name the key)
        ─▶ dump_config: runs/NAME/config.toml, every key resolved

Like `fleetrl.config`, it imports neither torch nor the rest of fleetrl.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

import tomli_w
from pydantic import ValidationError

from fleetrl.config import ConfigError, RunConfig

PRESETS = Path(__file__).parent / "configs"  # run configurations shipped by name


def _merge(into: dict[str, Any], overrides: dict[str, Any]) -> None:
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(into.get(key), dict):
            _merge(into[key], value)
        else:
            into[key] = value


def _describe(err: ValidationError) -> str:
    lines = []
    for problem in err.errors():
        key = ".".join(str(part) for part in problem["loc"]) or "config"
        message = problem["msg"]
        if problem["type"] == "extra_forbidden":
            message = "unknown key"
        lines.append(f"{key}: {message}")
    return "; ".join(lines)


def load_config(path: Path | None = None, overrides: dict[str, Any] | None = None) -> RunConfig:
    """The run config of a TOML file, a shipped preset named like `demo` (PRESETS), or
    the defaults, with nested `overrides` applied."""
    if path is None:
        return parse_config("", "defaults", overrides)
    if path.is_dir():
        raise ConfigError(f"config file {path} is a folder, not a TOML file")
    if not path.is_file():
        path = preset_path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{path}: not UTF-8 text, so not a TOML file") from None
    return parse_config(text, str(path), overrides, folder=path.parent)


def preset_path(name: Path) -> Path:
    """The file of the shipped preset `name` (`demo`: what `make demo` runs)."""
    preset = PRESETS / f"{name}.toml"
    if name.suffix or len(name.parts) != 1 or not preset.is_file():
        known = ", ".join(sorted(p.stem for p in PRESETS.glob("*.toml")))
        raise ConfigError(f"config file {name} does not exist (shipped presets: {known})")
    return preset


def parse_config(
    text: str, where: str, overrides: dict[str, Any] | None = None, folder: Path | None = None
) -> RunConfig:
    """The run config of TOML `text` (read from `where`, for messages), with `overrides`.
    A relative `tasks.tasks_dir` or `tasks.skip_solved` in the text is relative to `folder`
    (the file's), so a configuration finds its own files from any directory; overrides
    stay relative to the working directory."""
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as err:
        raise ConfigError(f"{where}: invalid TOML: {err}") from None
    tasks = data.get("tasks")
    for key in ("tasks_dir", "skip_solved"):
        value = tasks.get(key) if isinstance(tasks, dict) else None
        if folder is not None and isinstance(value, str) and value:  # empty: unset
            tasks[key] = str((folder / value).resolve())
    _merge(data, overrides or {})
    try:
        return RunConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_describe(err)) from None


def with_overrides(config: RunConfig, overrides: dict[str, Any]) -> RunConfig:
    """A copy of `config` with nested `overrides` applied, validated like a loaded file."""
    data = config.model_dump()
    _merge(data, overrides)
    try:
        return RunConfig.model_validate(data)
    except ValidationError as err:
        raise ConfigError(_describe(err)) from None


def parse_overrides(items: list[str]) -> dict[str, Any]:
    """`section.key=value` strings (values in TOML syntax; bare words are strings) as a
    nested dict for `load_config`."""
    overrides: dict[str, Any] = {}
    for item in items:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--set {item!r}: expected KEY=VALUE, e.g. trainer.lr=1e-4")
        try:
            value = tomllib.loads(f"v = {raw}")["v"]
        except tomllib.TOMLDecodeError:
            value = raw
        set_key(overrides, key.strip(), value)
    return overrides


def set_key(overrides: dict[str, Any], key: str, value: Any) -> None:
    """Set dotted `key` (e.g. `trainer.lr`) in a nested overrides dict."""
    *parents, leaf = key.split(".")
    node = overrides
    for depth, part in enumerate(parents):
        node = node.setdefault(part, {})
        if not isinstance(node, dict):
            section = ".".join(parents[: depth + 1])
            raise ConfigError(f"{key}: {section} was set to a value, not a section of keys")
    node[leaf] = value


def dump_config(config: RunConfig) -> str:
    """The fully resolved config as TOML (what runs/NAME/config.toml holds)."""
    return tomli_w.dumps(config.model_dump(exclude_none=True))
