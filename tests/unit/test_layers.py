"""The house rules: imports point down the data flow, the lab stays out of the product,
and packages import nothing heavy.

    types, config, config_files, observe, files  ←  model  ←  inference / envs / store
        ←  rollout / trainer  ←  orchestrate  ←  bench  ←  cli

The benchmarks a user runs (`fleetrl bench …`) are a room of their own, imported only by
`cli`. Research code lives under `scripts/` (its modules in `scripts/lab`): `fleetrl/`
never imports it, and every module of `fleetrl/` is reached from a command a user runs, not
only from scripts or tests.

Every `import fleetrl.…` in the package, at module level or inside a function, is checked
against the layer of the importing module. Module-level imports also form no cycle. That
package inits import nothing heavy is checked in a fresh interpreter (tests/env).
"""

from __future__ import annotations

import ast
from pathlib import Path

import fleetrl

ROOT = Path(fleetrl.__file__).parent
FOUNDATION = {"types", "config", "config_files", "observe", "files"}
STAGES = {"inference", "envs", "store"}
# What each top-level part may import besides itself.
ALLOWED: dict[str, set[str]] = {
    "__init__": set(),
    "types": set(),
    "config": set(),
    "config_files": {"config"},
    "observe": set(),
    "files": set(),
    "model": {"types", "files"},
    "inference": {"types", "config", "files", "model"},
    "envs": {"types", "config", "files", "model"},
    "store": {"types", "config", "files"},
    "rollout": FOUNDATION | {"model"} | STAGES,
    "trainer": FOUNDATION | {"model", "store"},
    "orchestrate": FOUNDATION | {"model"} | STAGES | {"rollout", "trainer"},
    "bench": FOUNDATION | {"model"} | STAGES | {"rollout", "trainer", "orchestrate"},
    "cli": FOUNDATION | {"model"} | STAGES | {"rollout", "trainer", "orchestrate", "bench"},
}
# Modules a user's command reaches: the console script (`fleetrl = fleetrl.cli:app`),
# `python -m fleetrl.cli` (how the launchers start roles), and files run by path.
ENTRY_POINTS = {
    "fleetrl.cli": "the console script",
    "fleetrl.cli.__main__": "python -m fleetrl.cli",
    "fleetrl.envs.verifier.grader_runner": "run by path inside each grading sandbox",
    "fleetrl.envs.verifier.call_grader": "run by path in calls mode's grader sandbox",
    "fleetrl.envs.verifier.call_worker": "run by path in calls mode's worker sandbox (and "
    "loaded by path by call_grader for the wire)",
    "fleetrl.envs.verifier.call_fresh": "loaded by path by call_grader (fresh inputs)",
    "fleetrl.inference.vllm_worker": "imported by name in vLLM's worker (worker_extension_cls)",
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def part_of(module: str) -> str:
    """`fleetrl.store.weights` -> `store`; `fleetrl` -> `__init__`."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def imports(path: Path, top_level_only: bool, names: bool = False) -> set[str]:
    """fleetrl modules `path` imports (outside `if TYPE_CHECKING:` blocks); with `names`,
    also `module.name` for each name of a `from module import name` (a submodule, maybe)."""
    found: set[str] = set()

    def scan(nodes: list[ast.stmt]) -> None:
        for node in nodes:
            if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
                continue
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module)
                if names:
                    found.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif not top_level_only:
                for field in ("body", "orelse", "finalbody", "handlers"):
                    children = getattr(node, field, [])
                    scan([c for c in children if isinstance(c, ast.stmt | ast.excepthandler)])

    scan(ast.parse(path.read_text()).body)
    return {name for name in found if name == "fleetrl" or name.startswith("fleetrl.")}


def sources() -> list[Path]:
    return sorted(ROOT.rglob("*.py"))


def test_every_part_has_a_rule():
    parts = {part_of(module_name(p)) for p in sources()}
    assert parts <= set(ALLOWED), parts - set(ALLOWED)


def test_imports_point_down_the_data_flow():
    wrong = []
    for path in sources():
        source = part_of(module_name(path))
        for target in imports(path, top_level_only=False):
            part = part_of(target)
            if part != source and part not in ALLOWED[source]:
                wrong.append(f"{module_name(path)} imports {target}")
    assert wrong == []


def test_no_import_cycles_between_modules():
    known = {module_name(p) for p in sources()}
    graph = {
        module_name(p): {
            m for m in imports(p, top_level_only=True) if m in known and m != module_name(p)
        }
        for p in sources()
    }
    # A package importing its own submodules is how packages work, not a cycle.
    for module, deps in graph.items():
        graph[module] = {d for d in deps if not module.startswith(d + ".") and d != "fleetrl"}
    state: dict[str, str] = {}
    cycles = []

    def visit(module: str, trail: list[str]) -> None:
        state[module] = "open"
        for dep in sorted(graph[module]):
            if state.get(dep) == "open":
                cycles.append(" -> ".join([*trail[trail.index(dep) :], dep]))
            elif dep not in state:
                visit(dep, [*trail, dep])
        state[module] = "done"

    for module in sorted(graph):
        if module not in state:
            visit(module, [module])
    assert cycles == []


def all_imports(path: Path) -> set[str]:
    """Every top-level module name `path` imports, ours or not."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module.split(".")[0])
        elif isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
    return found


def test_the_package_never_imports_the_lab():
    wrong = [
        f"{module_name(path)} imports {name}"
        for path in sources()
        for name in all_imports(path) & {"lab", "scripts", "tests"}
    ]
    assert wrong == []


def test_every_module_is_reached_from_a_command():
    """A module only scripts or tests import is research or dead code: it leaves the package."""
    known = {module_name(p): p for p in sources()}
    reached: set[str] = set()
    todo = list(ENTRY_POINTS)
    while todo:
        module = todo.pop()
        if module in reached or module not in known:
            continue
        reached.add(module)
        parts = module.split(".")
        todo += [".".join(parts[:i]) for i in range(1, len(parts))]  # its packages' inits
        todo += imports(known[module], top_level_only=False, names=True)
    assert sorted(set(known) - reached) == []


def test_rollout_reaches_suites_only_through_their_guides():
    """Guided groups, demonstrations and evaluation after a slip serve any task folder: the
    rollout stage asks the registry for a task's guide (`fleetrl.envs.tasks.suites.guide_for`)
    and never imports one suite's code (`fleetrl.envs.micro`)."""
    wrong = [
        f"{module_name(path)} imports {target}"
        for path in sources()
        if part_of(module_name(path)) == "rollout"
        for target in imports(path, top_level_only=False, names=True)
        if target == "fleetrl.envs.micro" or target.startswith("fleetrl.envs.micro.")
    ]
    assert wrong == []


def test_no_module_is_over_600_lines():
    """A module a newcomer reads in one sitting: one that grows past this splits by job."""
    long = {module_name(p): n for p in sources() if (n := len(p.read_text().splitlines())) > 600}
    assert long == {}
