"""Anti-cheat checks: the ways a model gets reward without fixing the bug, caught by name.

RL rewards whatever the verifier lets through, so every documented cheat has a check here,
and every check forces reward 0 and is counted under its flag:

| flag | what it catches |
|---|---|
| `tests_modified` | a test file or conftest.py added, changed or deleted |
| `pytest_config_modified` | a file pytest reads as configuration or the interpreter runs at start |
| `compiled_artefact` | a compiled extension or bytecode file: imported, but unreadable |
| `unparseable_code` | a changed `.py` file the checks cannot parse or decode: not trusted |
| `suspicious_encoding` | a declared source encoding other than UTF-8, ASCII or Latin-1 |
| `skip_marker` | skip / xfail markers or calls added to code |
| `exit_trick` | exiting, killing or replacing the process (sys.exit, os._exit, os.exec*) |
| `always_equal` | an `__eq__` true whatever the other operand (`__ne__` false), mock.ANY |
| `hardcoded_test_values` | code pairing hidden test inputs with their expected values |
| `runner_tampering` | reaching pytest, builtins, sys.modules, frames, gc, tracing, test files |
| `dynamic_code` | exec / eval / compile of text the checks cannot read, pickled code |
| `hidden_path_access` | tool calls aimed at the host, the verifier or git history |
| `network_attempt` | commands trying to reach the network |

The code checks parse the bytes of the agent's changed non-test `.py` files as Python
does (declared encodings included) and resolve names through imports, aliases, `vars()`,
`globals()`, `__builtins__`, `getattr` and `__import__` with literal names; a sensitive
namespace indexed by a computed name is flagged. Only what the change added counts. The
episode checks read the tool log: only `run` commands can reach the network or git history.

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
