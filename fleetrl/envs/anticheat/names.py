"""Name resolution: what each expression of a module may name, and what naming it raises.

Contract: `NameResolver(nodes)` resolves an expression to the dotted names it may evaluate to
('os._exit'), through imports, aliases, `vars()`, `globals()`, `__builtins__`, `getattr`
and `__import__` with literal names; `name_flags` and `module_flags` give the flags of
reaching a name or importing a module. The name sets here define what is sensitive.

What is not covered: names built at run time (a computed name in a sensitive namespace is
flagged by `code` instead), and objects reached through values the checks cannot name.
"""

from __future__ import annotations

import ast
import functools
import re
from collections.abc import Iterator

# Importing these is flagged, and so is every name reached inside them: the grader's own
# machinery, and modules that reach into the interpreter's memory or its hooks. Any other
# module is honest to import; inside some, the names below are flagged (frames, modules by
# computed names, the grader's hooks), not the module.
_TAMPER_MODULES = {"pytest", "_pytest", "pluggy", "builtins", "ctypes", "_ctypes",
                   "faulthandler", "site", "pdb", "bdb", "trace", "unittest", "_testcapi",
                   "_testinternalcapi", "_imp"}  # fmt: skip
_TAMPER_NAMES = {
    "__import__", "sys._getframe", "sys._current_frames", "sys._getframemodulename",
    "sys.settrace", "sys.setprofile", "sys.modules", "sys.meta_path", "sys.path_hooks",
    "sys.path_importer_cache", "sys.addaudithook", "sys.excepthook", "sys.unraisablehook",
    "sys.breakpointhook", "sys.monitoring", "threading.settrace", "threading.setprofile",
    "threading.settrace_all_threads", "threading.setprofile_all_threads",
    "inspect.currentframe", "inspect.stack", "inspect.trace", "inspect.getouterframes",
    "inspect.getinnerframes", "inspect.getframeinfo", "inspect.getsource",
    "inspect.getsourcelines", "inspect.getsourcefile", "importlib.reload",
    "importlib.__import__", "importlib.util.spec_from_file_location",
    "importlib.util.spec_from_loader", "importlib.util.module_from_spec", "importlib.machinery",
    "gc.get_objects", "gc.get_referrers", "gc.get_referents",
    "traceback.extract_stack", "traceback.walk_stack", "traceback.walk_tb",
    "traceback.format_stack", "traceback.print_stack", "traceback.StackSummary",
    "traceback.extract_tb", "linecache.getline", "linecache.getlines", "linecache.cache",
    # A module by a name computed at run time: the hidden test module, already imported.
    "pkgutil.resolve_name", "pydoc.locate", "pydoc.safeimport", "pydoc.importfile",
}  # fmt: skip
_TAMPER_PREFIXES = _TAMPER_MODULES | _TAMPER_NAMES
# Namespaces whose members may not be reached by a computed name.
SENSITIVE_ROOTS = _TAMPER_MODULES | {"sys", "os", "posix", "nt", "signal", "threading",
                   "_thread", "traceback", "linecache", "pkgutil", "pydoc", "inspect",
                   "importlib", "gc", "<globals>"}  # fmt: skip
# Ending the process without pytest seeing it. `sys.exit` and `SystemExit` are not here:
# pytest catches them (a test that exits fails), and scripts exit honestly. `os.kill` is
# refused at run time.
_EXIT_NAMES = {"os._exit", "os.abort", "os.execv", "os.execve", "os.execl", "os.execle",
               "os.execlp", "os.execlpe", "os.execvp", "os.execvpe", "os.fexecve",
               "signal.raise_signal", "_thread.interrupt_main"}  # fmt: skip
_ALWAYS_EQUAL_NAMES = {"unittest.mock.ANY", "mock.ANY"}
_DYNAMIC_NAMES = {"pickle.loads", "_pickle.loads", "pickle.load", "_pickle.load",
                  "pickle.Unpickler", "_pickle.Unpickler", "types.CodeType",
                  "types.FunctionType", "types.LambdaType"}  # fmt: skip
TEST_MODULE = re.compile(r"(^|\.)(test_\w*|\w*_test|conftest|tests?)(\.|$)")
_GLOBALS = "<globals>"
_TRACKED_ROOTS = SENSITIVE_ROOTS | {"pickle", "_pickle", "types", "mock", "getattr", "setattr",
                 "delattr", "vars", "globals", "locals", "exec", "eval", "compile",
                 "__import__", "runpy", "timeit"}  # fmt: skip


def constant_text(node: ast.AST | None) -> str | None:
    """The string an expression always evaluates to, folding `+`, f-strings and joins."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = constant_text(node.left), constant_text(node.right)
        return None if left is None or right is None else left + right
    if isinstance(node, ast.JoinedStr):
        parts = [constant_text(value) for value in node.values]
        return None if None in parts else "".join(parts)  # type: ignore[arg-type]
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "join"
        and len(node.args) == 1
        and isinstance(node.args[0], ast.List | ast.Tuple)
        and (sep := constant_text(node.func.value)) is not None
    ):
        parts = [constant_text(e) for e in node.args[0].elts]
        return None if None in parts else sep.join(parts)  # type: ignore[arg-type]
    return None


class NameResolver:
    """What each expression of one module may name, as dotted paths ('os._exit').

    Flow-insensitive on purpose: a name bound to several things stands for all of them.
    """

    def __init__(self, nodes: list[ast.AST]) -> None:
        self.aliases: dict[str, set[str]] = {}
        self.star: list[str] = []  # modules imported with `from m import *`
        # Names bound to a function: `type(f)` and `f.__class__` are types.FunctionType.
        self.functions = {
            n.name for n in nodes if isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef)
        }
        assignments = []
        for node in nodes:
            if isinstance(node, ast.Import):
                for alias in node.names:
                    bound = alias.name if alias.asname else alias.name.split(".")[0]
                    self._bind(alias.asname or bound, {bound})
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                for alias in node.names:
                    if alias.name == "*":
                        self.star.append(node.module)
                    else:
                        self._bind(alias.asname or alias.name, {f"{node.module}.{alias.name}"})
            elif isinstance(node, ast.Assign | ast.AnnAssign | ast.NamedExpr):
                targets = node.targets if isinstance(node, ast.Assign) else [node.target]
                assignments += [(t, node.value) for t in targets if node.value is not None]
            elif isinstance(node, ast.arguments):
                positional = [*node.posonlyargs, *node.args]
                pairs = zip(
                    positional[len(positional) - len(node.defaults) :], node.defaults, strict=True
                )
                assignments += [(ast.Name(arg.arg), value) for arg, value in pairs]
                assignments += [
                    (ast.Name(arg.arg), value)
                    for arg, value in zip(node.kwonlyargs, node.kw_defaults, strict=True)
                    if value is not None
                ]
        for _ in range(3):  # aliases of aliases
            for target, value in assignments:
                self._assign(target, value)

    def _bind(self, name: str, qualnames: set[str]) -> None:
        # Only names that can lead somewhere flagged are followed: tracking every local
        # would grow sets quadratically in long functions.
        tracked = {q for q in qualnames if q != name and q.split(".")[0] in _TRACKED_ROOTS}
        if tracked:
            self.aliases.setdefault(name, set()).update(tracked)

    def _assign(self, target: ast.AST, value: ast.AST) -> None:
        if isinstance(target, ast.Name):
            self._bind(target.id, self.resolve(value))
        elif isinstance(target, ast.Tuple | ast.List) and isinstance(value, ast.Tuple | ast.List):
            for t, v in zip(target.elts, value.elts, strict=False):
                self._assign(t, v)

    def resolve(self, node: ast.AST) -> set[str]:
        """Dotted names `node` may evaluate to ('' parts never appear); empty if none."""
        if isinstance(node, ast.Name):
            if node.id == "__builtins__":
                return {"builtins"}
            return {node.id, *self.aliases.get(node.id, ()), *(f"{m}.{node.id}" for m in self.star)}
        if isinstance(node, ast.Attribute):
            if node.attr == "__dict__":  # the namespace itself: its keys are its members
                return self.resolve(node.value)
            if node.attr == "__class__" and (kind := self._type_of(node.value)):
                return {kind}
            return {f"{base}.{node.attr}" for base in self.resolve(node.value)}
        if isinstance(node, ast.Subscript):
            key = constant_text(node.slice)
            namespaces = self.namespaces(node.value)
            return set() if key is None else self._members(namespaces, key)
        if isinstance(node, ast.NamedExpr):
            return self.resolve(node.value)
        if isinstance(node, ast.Call):
            return self._call(node)
        return set()

    def namespaces(self, node: ast.AST) -> set[str]:
        """Modules whose namespace `node` is (vars(m), m.__dict__, globals(), sys.modules)."""
        if isinstance(node, ast.Call):
            func = self.resolve(node.func)
            if func & {"vars", "builtins.vars"}:
                return self.resolve(node.args[0]) if node.args else {_GLOBALS}
            if func & {"globals", "locals", "builtins.globals", "builtins.locals"}:
                return {_GLOBALS}
            return set()
        if isinstance(node, ast.Attribute) and node.attr == "__dict__":
            return self.resolve(node.value)
        names = self.resolve(node)
        return names & {"builtins", "sys.modules"}

    def _members(self, namespaces: set[str], key: str) -> set[str]:
        out = set()
        for namespace in namespaces:
            if namespace == _GLOBALS:
                out |= self.resolve(ast.Name(key))
            elif namespace == "sys.modules":
                out.add(key)
            else:
                out.add(f"{namespace}.{key}")
        return out

    def _type_of(self, node: ast.AST) -> str | None:
        """'types.FunctionType' for a lambda or a function of this module, 'types.CodeType'
        for a `__code__`: building either by hand runs code the checks never read."""
        if isinstance(node, ast.Lambda) or (
            isinstance(node, ast.Name) and node.id in self.functions
        ):
            return "types.FunctionType"
        if isinstance(node, ast.Attribute) and node.attr == "__code__":
            return "types.CodeType"
        return None

    def _call(self, node: ast.Call) -> set[str]:
        func = self.resolve(node.func)
        first = constant_text(node.args[0]) if node.args else None
        if func & {"type", "builtins.type"} and len(node.args) == 1:
            kind = self._type_of(node.args[0])
            return {kind} if kind else set()
        if func & {"getattr", "builtins.getattr"} and len(node.args) >= 2:
            name = constant_text(node.args[1])
            return set() if name is None else {f"{b}.{name}" for b in self.resolve(node.args[0])}
        if func & {"__import__", "builtins.__import__", "importlib.__import__"} and first:
            return {first.split(".")[0], first}
        if func & {"importlib.import_module"} and first:
            return {first}
        if isinstance(node.func, ast.Attribute) and node.func.attr == "get" and first:
            return self._members(self.namespaces(node.func.value), first)
        return set()


def normal_name(name: str) -> str:
    """posix._exit and nt._exit are os._exit; a module's `sys` (`os.sys.modules`,
    `inspect.sys`) is sys."""
    root, _, rest = name.partition(".")
    if root in SENSITIVE_ROOTS and ".sys." in f".{rest}.":
        tail = f".{rest}.".partition(".sys.")[2].rstrip(".")
        return f"sys.{tail}" if tail else "sys"
    return f"os.{rest}" if root in ("posix", "nt") and rest else name


def is_under(name: str, prefixes: set[str]) -> bool:
    """`name` is one of `prefixes` or inside one ('sys.modules.get' is under 'sys.modules')."""
    parts = name.split(".")
    return any(".".join(parts[:i]) in prefixes for i in range(1, len(parts) + 1))


@functools.lru_cache(maxsize=4096)
def name_flags(name: str) -> tuple[str, ...]:
    """Flags raised by reaching the dotted name `name` (not by calling it)."""
    name = normal_name(name)
    return tuple(
        flag
        for flag, hit in [
            ("exit_trick", name in _EXIT_NAMES),
            ("runner_tampering", is_under(name, _TAMPER_PREFIXES)),
            ("always_equal", name in _ALWAYS_EQUAL_NAMES),
            ("dynamic_code", name in _DYNAMIC_NAMES),
        ]
        if hit
    )


def module_flags(module: str) -> Iterator[str]:
    """Flags raised by importing `module`."""
    if module.split(".")[0] in _TAMPER_MODULES or TEST_MODULE.search(module):
        yield "runner_tampering"
