"""Layering rules: the library never imports Prefect; fast paths stay light."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

SRC = Path(__file__).parents[2] / "src" / "evalsentry"


def test_library_never_imports_prefect() -> None:
    """No module under src/evalsentry imports prefect, at any depth of the code."""
    offenders = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n.split(".")[0] == "prefect"]
    assert offenders == []


def test_importing_the_package_and_cli_loads_no_heavy_module() -> None:
    """`import evalsentry.cli` pulls in neither torch, great_expectations nor prefect."""
    code = (
        "import sys, evalsentry, evalsentry.cli;"
        "print(sorted(m for m in ('torch','great_expectations','prefect','pandas') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_flows_and_tasks_are_imported_only_as_the_installed_package() -> None:
    """`flows/` and `tasks/` are `evalsentry.flows`/`evalsentry.tasks`: no code imports them by
    their folder names, which would load a second copy of each flow and miss it once installed."""
    root = SRC.parents[1]
    offenders = []
    for folder in ("src", "flows", "tasks", "tests", "bench", "examples"):
        for path in (root / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    names = [node.module]
                offenders += [
                    f"{path.relative_to(root)}: {n}"
                    for n in names
                    if n.split(".")[0] in ("flows", "tasks")
                ]
    assert offenders == []
    import evalsentry.flows.weekly_eval
    import evalsentry.tasks.evaluate

    assert Path(evalsentry.flows.weekly_eval.__file__).parent == root / "flows"
    assert Path(evalsentry.tasks.evaluate.__file__).parent == root / "tasks"


def test_evaluation_does_not_import_the_gate_for_metric_names() -> None:
    """Metric names, slices and the overall slice come from `evalsentry.gate.metrics`: no module
    imports the decision module (`evalsentry.gate.week`) for them."""
    root = SRC.parents[1]
    moved = {"metric_names", "OVERALL", "SLICE_PREFIX", "slice_column", "slice_columns"}
    offenders = []
    for folder in ("src", "flows", "tasks", "bench", "examples"):
        for path in (root / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.module == "evalsentry.gate.week":
                    offenders += [
                        f"{path.relative_to(root)}: {a.name}" for a in node.names if a.name in moved
                    ]
    assert offenders == []


MAX_FUNCTION_LINES = 60
MAX_MODULE_LINES = 500


def test_no_function_is_over_60_lines() -> None:
    """Every function in src/evalsentry, flows and tasks is at most 60 lines, docstring included
    (from its `def` to its last line, decorators excluded): a longer one is split into steps."""
    root = SRC.parents[1]
    offenders = []
    for folder in (SRC, root / "flows", root / "tasks"):
        for path in sorted(folder.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    length = (node.end_lineno or node.lineno) - node.lineno + 1
                    if length > MAX_FUNCTION_LINES:
                        offenders.append(f"{path.relative_to(root)}:{node.name} {length}")
    assert offenders == [], "\n".join(offenders)


def test_no_module_is_over_500_lines() -> None:
    """Every module in src/evalsentry, flows and tasks is at most 500 lines: a longer one holds
    more than one concern, and is split by them."""
    root = SRC.parents[1]
    offenders = [
        f"{path.relative_to(root)} {length}"
        for folder in (SRC, root / "flows", root / "tasks")
        for path in sorted(folder.rglob("*.py"))
        if (length := len(path.read_text().splitlines())) > MAX_MODULE_LINES
    ]
    assert offenders == [], "\n".join(offenders)


#: The library's layers, lowest first: a module may import its own layer and those below it,
#: never one above (the gate reads results and never runs a model; nothing imports reports).
LAYERS = (
    "root",  # errors, names, weeks, storage, local_files, trust, documents, sections, config
    "cost",
    "checkpoints",
    "evalsets",
    "history",
    "gate",
    "evaluation",
    "harnesses",  # imported harness results: recorded through evaluation's pipeline
    "reports",
    "cli",
)


def _module_name(path: Path) -> str:
    parts = path.relative_to(SRC.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _is_module(name: str) -> bool:
    """Whether ``name`` (``evalsentry.x.y``) is a module or package of the library."""
    path = SRC.parent.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def _layer(module: str) -> int:
    """The layer index of an evalsentry module (a root module is layer 0)."""
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 2 or parts[-1] in LAYERS else 0


def _imports(tree: ast.AST, *, typing_only: bool) -> list[str]:
    """The evalsentry modules a module imports, at any depth of its code; ``typing_only=False``
    leaves out those under ``if TYPE_CHECKING:``, which never run."""
    found: list[str] = []

    def visit(node: ast.AST) -> None:
        if (
            not typing_only
            and isinstance(node, ast.If)
            and ast.unparse(node.test) == "TYPE_CHECKING"
        ):
            for child in node.orelse:
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            # ``from evalsentry.gate import week`` imports the module evalsentry.gate.week
            found.extend(
                f"{node.module}.{a.name}" if _is_module(f"{node.module}.{a.name}") else node.module
                for a in node.names
            )
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return [m for m in found if m.split(".")[0] == "evalsentry" and m.split(".")[1:2] != ["flows"]]


def _graph(*, typing_only: bool) -> dict[str, set[str]]:
    """Each library module (the package's lazy ``__init__`` aside) and what it imports."""
    graph = {}
    for path in sorted(SRC.rglob("*.py")):
        module = _module_name(path)
        if module == "evalsentry":
            continue
        tree = ast.parse(path.read_text())
        graph[module] = {m for m in _imports(tree, typing_only=typing_only) if m != module}
    return graph


def test_no_module_imports_a_layer_above_its_own() -> None:
    """Every import, a type checker's included, points down the layers (or stays in one)."""
    offenders = [
        f"{module} ({LAYERS[_layer(module)]}) imports {target} ({LAYERS[_layer(target)]})"
        for module, targets in _graph(typing_only=True).items()
        for target in sorted(targets)
        if target != "evalsentry" and _layer(target) > _layer(module)
    ]
    assert offenders == []


def test_there_is_no_import_cycle() -> None:
    """No chain of imports that run (module level or inside a function) leads back to its
    start; an import only a type checker reads (``if TYPE_CHECKING:``) is not one."""
    graph = _graph(typing_only=False)
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    cycles: list[str] = []

    def walk(module: str, path: list[str]) -> None:
        state[module] = 1
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                cycles.append(" -> ".join([*path[path.index(target) :], target]))
            elif target in graph and not state.get(target):
                walk(target, [*path, target])
        state[module] = 2

    for module in graph:
        if not state.get(module):
            walk(module, [module])
    assert cycles == []


def test_the_layers_are_the_packages() -> None:
    """Each layer above the root is a subpackage whose docstring says what it owns, and the
    root holds only the modules every layer shares."""
    packages = sorted(p.name for p in SRC.iterdir() if (p / "__init__.py").is_file())
    assert packages == sorted(LAYERS[1:])
    for name in packages:
        doc = ast.get_docstring(ast.parse((SRC / name / "__init__.py").read_text()))
        assert doc and "Owns:" in doc and "mport" in doc, name
    root = sorted(p.stem for p in SRC.glob("*.py") if p.stem != "__init__")
    assert root == [
        "config", "documents", "errors", "local_files", "names", "sections", "storage", "trust",
        "weeks",
    ]  # fmt: skip
