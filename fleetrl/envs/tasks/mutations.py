"""Syntax-tree mutations that each put one bug into a Python source file, SWE-smith style.

`find_mutations(path, source)` lists every place one of the KINDS applies inside a function
body. A mutation is a small list of text edits (byte offsets into the UTF-8 source) rather
than a re-printed tree, so the file keeps its formatting and comments and the gold patch is
the one-line change a human would write. Kinds:

    operator_swap        a + b -> a - b, x += 1 -> x -= 1, p and q -> p or q, ...
    comparison_flip      a < b -> a > b, == -> !=, in -> not in, is -> is not
    off_by_one           range(n) -> range(n - 1), xs[i - 1] -> xs[i], s[:k] -> s[:k - 1]
    constant_change      a number literal n -> n + 1
    dropped_statement    one simple or compound statement removed from a block of >= 2
    swapped_arguments    f(a, b) -> f(b, a)
    negated_condition    if c: -> if not c: (and back), also in `x if c else y`
    wrong_return_value   return e -> another return value of the function, True <-> False, None
    feature_deletion     a function body (docstring kept) -> raise NotImplementedError

Every mutation found here changes the file and still parses; whether it is a *bug* (some
test notices) is for the generator to find out by running the tests. What is not covered:
code outside functions, f-string internals, `while` conditions (negating them mostly makes
loops that never end).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from fleetrl.envs import pyast

KINDS = (
    "operator_swap",
    "comparison_flip",
    "off_by_one",
    "constant_change",
    "dropped_statement",
    "swapped_arguments",
    "negated_condition",
    "wrong_return_value",
    "feature_deletion",
)

Edit = tuple[int, int, str]  # (start byte, end byte, replacement text)

# Operator -> (its source token, the token that replaces it).
_BINOPS: dict[type, tuple[str, str]] = {
    ast.Add: ("+", "-"),
    ast.Sub: ("-", "+"),
    ast.Mult: ("*", "+"),
    ast.Div: ("/", "*"),
    ast.FloorDiv: ("//", "/"),
    ast.Mod: ("%", "//"),
    ast.Pow: ("**", "*"),
    ast.LShift: ("<<", ">>"),
    ast.RShift: (">>", "<<"),
    ast.BitAnd: ("&", "|"),
    ast.BitOr: ("|", "&"),
    ast.BitXor: ("^", "&"),
}
_BOOLOPS: dict[type, tuple[str, str]] = {ast.And: ("and", "or"), ast.Or: ("or", "and")}
_COMPARISONS: dict[type, tuple[str, str]] = {
    ast.Lt: ("<", ">"),
    ast.Gt: (">", "<"),
    ast.LtE: ("<=", ">="),
    ast.GtE: (">=", "<="),
    ast.Eq: ("==", "!="),
    ast.NotEq: ("!=", "=="),
    ast.Is: ("is", "is not"),
    ast.IsNot: ("is not", "is"),
    ast.In: ("in", "not in"),
    ast.NotIn: ("not in", "in"),
}
# Binary operators that bind at least as tightly as `+`, so `a * b - 1` needs no parentheses.
_ARITHMETIC = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow)
# Expressions that need no parentheses as the operand of `not` or of `+ 1` / `- 1`.
_TIGHT = (ast.Name, ast.Constant, ast.Attribute, ast.Subscript, ast.Call, ast.Compare)
_DROPPABLE = (
    ast.Assign,
    ast.AugAssign,
    ast.AnnAssign,
    ast.Expr,
    ast.If,
    ast.For,
    ast.AsyncFor,
    ast.While,
    ast.Delete,
)
_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)


@dataclass(frozen=True)
class Mutation:
    """One bug that can be put into one file."""

    kind: str  # one of KINDS
    path: str  # repo-relative posix path of the file
    function: str  # qualified name of the enclosing function, e.g. "Stack.push"
    line: int  # 1-based line of the change
    description: str  # what changes, for reports (never shown to the agent)
    edits: tuple[Edit, ...]  # non-overlapping byte-range replacements of the source

    def apply(self, source: str) -> str:
        """The mutated file."""
        data = source.encode()
        for start, end, text in sorted(self.edits, reverse=True):
            data = data[:start] + text.encode() + data[end:]
        return data.decode()


def find_mutations(path: str, source: str, kinds: Iterable[str] = KINDS) -> list[Mutation]:
    """Every distinct mutation of the given kinds in `source`, in a fixed order.

    Order: by kind (KINDS order), then by position in the file. Mutations that would give
    the same file as an earlier one, no change, or a file that does not parse are dropped.
    """
    wanted = set(kinds)
    unknown = wanted - set(KINDS)
    if unknown:
        raise ValueError(f"unknown mutation kinds {sorted(unknown)}; known: {', '.join(KINDS)}")
    finder = _Finder(path, source, wanted)
    tree = pyast.parse(source)
    finder.visit(tree)
    statements = _statement_spans(source, tree)
    found, seen = [], {source}
    for mutation in sorted(finder.found, key=lambda m: KINDS.index(m.kind)):  # stable sort
        mutated = mutation.apply(source)
        if mutated in seen:
            continue
        seen.add(mutated)
        if _parses(source, mutation, statements):
            found.append(mutation)
    return found


def _statement_spans(source: str, tree: ast.Module) -> list[tuple[int, int]]:
    """(start byte, end byte) of each top-level statement, decorators and whole lines
    included."""
    starts = [0]
    for line in source.encode().splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    spans = []
    for node in tree.body:
        first = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))])
        spans.append((starts[first - 1], starts[min(node.end_lineno or first, len(starts) - 1)]))
    return spans


def _parses(source: str, mutation: Mutation, statements: list[tuple[int, int]]) -> bool:
    """Whether the mutated file parses: only the top-level statement holding the edits is
    parsed again (an edit inside a function body cannot break another one, and parsing a
    5,000-line module once per site took minutes), the whole file where there is none."""
    low = min(start for start, _, _ in mutation.edits)
    high = max(end for _, end, _ in mutation.edits)
    first, last = next(((a, b) for a, b in statements if a <= low and high <= b), (0, None))
    text = source.encode()[first:last]
    for start, end, new in sorted(mutation.edits, reverse=True):
        text = text[: start - first] + new.encode() + text[end - first :]
    try:
        pyast.parse(text.decode())
    except SyntaxError:
        return False
    return True


def _int_value(node: ast.expr) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = _int_value(node.operand)
        return None if inner is None else -inner
    return None


def _own_returns(function: ast.AST) -> Iterator[ast.Return]:
    """Return statements of `function` itself, not of functions or classes nested in it."""
    for child in ast.iter_child_nodes(function):
        if isinstance(child, ast.Return):
            yield child
        if not isinstance(child, _SCOPES):
            yield from _own_returns(child)


class _Finder(ast.NodeVisitor):
    """Walks one module and records a Mutation for every applicable site."""

    def __init__(self, path: str, source: str, kinds: set[str]) -> None:
        self.path, self.kinds = path, kinds
        self.data = source.encode()
        self.line_starts = [0]
        for line in self.data.splitlines(keepends=True):
            self.line_starts.append(self.line_starts[-1] + len(line))
        self.scope: list[str] = []  # enclosing class and function names
        self.functions: list[ast.FunctionDef | ast.AsyncFunctionDef] = []
        self.found: list[Mutation] = []

    # -- source positions ------------------------------------------------------------

    def _pos(self, line: int, col: int) -> int:
        return self.line_starts[line - 1] + col  # ast columns are UTF-8 byte offsets

    def _span(self, node: ast.expr) -> tuple[int, int]:
        return (
            self._pos(node.lineno, node.col_offset),
            self._pos(node.end_lineno, node.end_col_offset),
        )

    def _text(self, node: ast.expr) -> str:
        start, end = self._span(node)
        return self.data[start:end].decode()

    def _lines(self, first: ast.stmt, last: ast.stmt) -> tuple[int, int, str] | None:
        """Byte range of whole lines from `first` to `last` and the first line's indent,
        or None when other code shares those lines (`a = 1; b = 2`)."""
        start = self.line_starts[first.lineno - 1]
        indent = self.data[start : self._pos(first.lineno, first.col_offset)].decode()
        end = self._pos(last.end_lineno, last.end_col_offset)
        line_end = self.line_starts[last.end_lineno]
        rest = self.data[end:line_end].decode().strip()
        if indent.strip() or (rest and not rest.startswith("#")):
            return None
        return start, line_end, indent

    # -- recording ---------------------------------------------------------------------

    def _add(
        self, kind: str, node: ast.stmt | ast.expr, description: str, *edits: Edit | None
    ) -> None:
        if kind in self.kinds and self.functions and edits and None not in edits:
            self.found.append(
                Mutation(
                    kind=kind,
                    path=self.path,
                    function=".".join(self.scope),
                    line=node.lineno,
                    description=description,
                    edits=tuple(e for e in edits if e is not None),
                )
            )

    def _between(self, left: ast.expr, right: ast.expr, old: str, new: str) -> Edit | None:
        """Replace the operator token `old` between two operands, keeping parentheses and
        spacing; None when a comment sits in between (it could contain the token)."""
        start = self._pos(left.end_lineno, left.end_col_offset)
        gap = self.data[start : self._pos(right.lineno, right.col_offset)].decode()
        # Keywords match as whole words with any whitespace inside (`is  not`).
        words = r"\b" + r"\s+".join(old.split()) + r"\b"
        pattern = words if old[0].isalpha() else re.escape(old)
        match = None if "#" in gap else re.search(pattern, gap)
        if match is None:
            return None
        begin, end = (start + len(gap[:i].encode()) for i in match.span())
        return begin, end, new

    def _replace(self, node: ast.expr, text: str) -> Edit:
        return (*self._span(node), text)

    def _shifted(self, node: ast.expr, delta: int) -> str:
        """Source of `node` plus `delta` (+1 or -1), folded into an existing `+ c` / `- c`."""
        value = _int_value(node)
        if value is not None:
            return str(value + delta)
        right = _int_value(node.right) if isinstance(node, ast.BinOp) else None
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add | ast.Sub) and right:
            offset = (right if isinstance(node.op, ast.Add) else -right) + delta
            left = self._text(node.left)
            return left if offset == 0 else f"{left} {'+' if offset > 0 else '-'} {abs(offset)}"
        text = self._text(node)
        if not isinstance(node, _TIGHT) and not (
            isinstance(node, ast.BinOp) and isinstance(node.op, _ARITHMETIC)
        ):
            text = f"({text})"
        return f"{text} {'+' if delta > 0 else '-'} 1"

    # -- scopes ------------------------------------------------------------------------

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.scope.append(node.name)
        self.generic_visit(node)
        self.scope.pop()

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        self.scope.append(node.name)
        self.functions.append(node)
        self._feature_deletion(node)
        self._wrong_returns(node)
        self.generic_visit(node)
        self.functions.pop()
        self.scope.pop()

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_JoinedStr(self, node: ast.JoinedStr) -> None:
        return  # positions inside f-strings are unreliable before Python 3.12

    def generic_visit(self, node: ast.AST) -> None:
        for field in ("body", "orelse", "finalbody"):
            block = getattr(node, field, None)
            if isinstance(block, list) and block and isinstance(block[0], ast.stmt):
                self._dropped_statements(block)
        super().generic_visit(node)

    # -- the kinds -----------------------------------------------------------------------

    def visit_BinOp(self, node: ast.BinOp) -> None:
        if type(node.op) in _BINOPS:
            old, new = _BINOPS[type(node.op)]
            edit = self._between(node.left, node.right, old, new)
            self._add("operator_swap", node, f"`{old}` -> `{new}`", edit)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if type(node.op) in _BINOPS:
            old, new = _BINOPS[type(node.op)]
            edit = self._between(node.target, node.value, old + "=", new + "=")
            self._add("operator_swap", node, f"`{old}=` -> `{new}=`", edit)
        self.generic_visit(node)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        old, new = _BOOLOPS[type(node.op)]
        edit = self._between(node.values[0], node.values[1], old, new)
        self._add("operator_swap", node, f"`{old}` -> `{new}`", edit)
        self.generic_visit(node)

    def visit_Compare(self, node: ast.Compare) -> None:
        old, new = _COMPARISONS[type(node.ops[0])]
        edit = self._between(node.left, node.comparators[0], old, new)
        self._add("comparison_flip", node, f"`{old}` -> `{new}`", edit)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        args = node.args
        if isinstance(node.func, ast.Name) and node.func.id == "range" and not node.keywords:
            if len(args) == 1 and not isinstance(args[0], ast.Starred):
                stop = self._replace(args[0], self._shifted(args[0], -1))
                self._add("off_by_one", node, "range stop - 1", stop)
            elif len(args) in (2, 3) and not any(isinstance(a, ast.Starred) for a in args):
                start = self._replace(args[0], self._shifted(args[0], +1))
                self._add("off_by_one", node, "range start + 1", start)
                stop = self._replace(args[1], self._shifted(args[1], -1))
                self._add("off_by_one", node, "range stop - 1", stop)
        if len(args) >= 2 and not any(isinstance(a, ast.Starred) for a in args[:2]):
            first, second = self._text(args[0]), self._text(args[1])
            if first != second:
                swap = (self._replace(args[0], second), self._replace(args[1], first))
                self._add("swapped_arguments", node, f"swap `{first}` and `{second}`", *swap)
        self.generic_visit(node)

    def visit_Subscript(self, node: ast.Subscript) -> None:
        index = node.slice
        if isinstance(index, ast.Slice):
            for bound, delta in ((index.lower, +1), (index.upper, -1)):
                if bound is not None:
                    edit = self._replace(bound, self._shifted(bound, delta))
                    self._add("off_by_one", node, f"slice bound {delta:+d}", edit)
        elif _int_value(index) is not None or (
            isinstance(index, ast.BinOp)
            and isinstance(index.op, ast.Add | ast.Sub)
            and _int_value(index.right) is not None
        ):
            # Only indices that already do arithmetic with a literal: `d[key]` may be a dict.
            edit = self._replace(index, self._shifted(index, +1))
            self._add("off_by_one", node, "index + 1", edit)
        self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> None:
        if type(node.value) in (int, float):
            new = repr(node.value + 1)
            self._add("constant_change", node, f"{node.value!r} -> {new}", self._replace(node, new))

    def visit_If(self, node: ast.If | ast.IfExp) -> None:
        test = node.test
        if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            new = self._text(test.operand)
        elif isinstance(test, (*_TIGHT, ast.BinOp)):
            new = f"not {self._text(test)}"
        else:
            new = f"not ({self._text(test)})"
        self._add("negated_condition", node, "condition negated", self._replace(test, new))
        self.generic_visit(node)

    visit_IfExp = visit_If

    def _dropped_statements(self, block: list[ast.stmt]) -> None:
        body = block[1:] if _is_docstring(block[0]) else block
        if len(body) < 2:
            return  # dropping the only statement would leave an empty block
        for statement in body:
            if isinstance(statement, _DROPPABLE) and not _is_docstring(statement):
                lines = self._lines(statement, statement)
                edit = None if lines is None else (lines[0], lines[1], "")
                self._add("dropped_statement", statement, "statement removed", edit)

    def _wrong_returns(self, function: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        returns = [r for r in _own_returns(function) if r.value is not None]
        texts = [self._text(r.value) for r in returns]
        for ret, text in zip(returns, texts, strict=True):
            value = ret.value
            if isinstance(value, ast.Constant) and type(value.value) is bool:
                new = str(not value.value)
            elif isinstance(value, ast.Constant):
                continue  # numbers are constant_change's; None and strings have no "wrong"
            else:
                new = next((t for t in texts if t != text), "None")
            self._add("wrong_return_value", ret, f"return {new}", self._replace(value, new))

    def _feature_deletion(self, function: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        body = function.body[1:] if _is_docstring(function.body[0]) else function.body
        if not body or function.name.startswith("__") or body[-1].end_lineno == body[0].lineno:
            return  # nothing to rebuild, or a one-liner, or a dunder every test depends on
        if getattr(body[0], "decorator_list", None):
            return  # the body starts with a decorated definition: its lines start earlier
        lines = self._lines(body[0], body[-1])
        if lines is None:
            return
        start, end, indent = lines
        newline = "\r\n" if self.data[:end].endswith(b"\r\n") else "\n"  # the file's own
        edit = (start, end, f"{indent}raise NotImplementedError{newline}")
        self._add("feature_deletion", function, "body removed", edit)


def _is_docstring(statement: ast.stmt) -> bool:
    return (
        isinstance(statement, ast.Expr)
        and isinstance(statement.value, ast.Constant)
        and isinstance(statement.value.value, str)
    )
