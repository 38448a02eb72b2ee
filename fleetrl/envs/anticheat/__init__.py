"""Anti-cheat checks: flags for what a submission does that the grading itself cannot undo.

RL rewards whatever the verifier lets through. Most cheats are closed by the grading: the
agent's tests and configuration are never applied, a skipped or exiting test is not a
passed one, the hidden tests are restored and hashed, the graded process is watched at run
time. A check here flags by effect, not by syntax: honest engineering (tests of one's own,
scripts that exit, reading the repository's history, any standard-library module used as
documented) raises nothing. Each check stays only for what the grading cannot see:

| flag | what it catches |
|---|---|
| `tests_modified` | (verifier) a non-test file where a hidden test goes, a package named so |
| `pytest_config_modified` | a file pytest reads as configuration or the interpreter runs at start |
| `compiled_artefact` | a compiled extension or bytecode file: imported, but unreadable |
| `unparseable_code` | a changed `.py` file the checks cannot parse or decode: not trusted |
| `suspicious_encoding` | a declared source encoding other than UTF-8, ASCII or Latin-1 |
| `exit_trick` | ending or replacing the process behind pytest's back (os._exit, exec, abort) |
| `always_equal` | an `__eq__` true whatever the other operand (`__ne__` false), mock.ANY |
| `hardcoded_test_values` | code pairing hidden test inputs with their expected values |
| `runner_tampering` | reaching pytest, builtins, ctypes, sys.modules, frames, tracing, tests |
| `dynamic_code` | code the checks cannot read: exec of text, pickles, `__code__`, runpy |
| `hidden_path_access` | tool calls aimed at the host's directories or fleetrl's cache |
| `network_attempt` | running a network program, installing from an index, git fetch |

The code checks parse the bytes of the agent's changed non-test `.py` files as Python
does (declared encodings included) and resolve names through imports, aliases, `vars()`,
`globals()`, `__builtins__`, `getattr` and `__import__` with literal names; a sensitive
namespace indexed by a computed name is flagged. Only what the change added counts. The
episode checks read the tool log's `run` commands as the shell does (command words, not
words): the repository's history holds nothing that reveals the fix, so reading it is
honest.

Modules: `paths` (which files were touched), `names` (what an expression may name, and
what naming it raises), `equality` (`__eq__` that compares nothing), `hardcoding` (the
hidden tests' literals and code pairing them), `code` (the changed `.py` files, using the
three before) and `episode` (the tool log).

What is not covered: code that computes its way to a frame or a module through objects the
checks cannot name (their runtime side is the grader's audit hook and the pristine grading
copy), and hard-coding keyed by values that are not literals of the hidden tests.
"""

from __future__ import annotations

from fleetrl.envs.anticheat.code import code_flags
from fleetrl.envs.anticheat.episode import episode_flags
from fleetrl.envs.anticheat.hardcoding import TestFacts, test_facts
from fleetrl.envs.anticheat.paths import (
    is_config_file,
    is_importable_artefact,
    is_test_file,
    path_flags,
)

__all__ = [
    "TestFacts",
    "code_flags",
    "episode_flags",
    "is_config_file",
    "is_importable_artefact",
    "is_test_file",
    "path_flags",
    "test_facts",
]
