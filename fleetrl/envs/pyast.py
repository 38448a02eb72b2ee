"""`ast.parse` (and `ast.literal_eval`) behind one lock, for code that parses Python in
threads.

CPython 3.11 before 3.11.8 keeps the AST converter's recursion depth in state shared by
the whole interpreter, so two threads parsing at once can fail with `SystemError: AST
constructor recursion depth mismatch` (seen here on 3.11.7: two of 310 gradings of an
evaluation; once in `fleetrl tasks make --jobs 2`, through an `ast.literal_eval` of a
string, which parses too). Gradings run in threads, and the verifier's honeypots and
anti-cheat checks parse the agent's code, so every parse in `fleetrl.envs` goes through
`parse`, and every `ast.literal_eval` of a string through `literal_eval`.
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str | bytes, mode: str = "exec") -> ast.AST:
    """`ast.parse(source, mode=mode)`, one thread at a time."""
    with _LOCK:
        return ast.parse(source, mode=mode)


def literal_eval(text: str) -> object:
    """`ast.literal_eval(text)`, whose parse goes through `parse` (it strips leading spaces
    and tabs as `ast.literal_eval` does)."""
    return ast.literal_eval(parse(text.lstrip(" \t"), mode="eval"))
