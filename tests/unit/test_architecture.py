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
    """Metric names, slices and the overall slice come from `evalsentry.metrics`: no module
    imports the decision module (`evalsentry.gate`) for them."""
    root = SRC.parents[1]
    moved = {"metric_names", "OVERALL", "SLICE_PREFIX", "slice_column", "slice_columns"}
    offenders = []
    for folder in ("src", "flows", "tasks", "bench", "examples"):
        for path in (root / folder).rglob("*.py"):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ImportFrom) and node.module == "evalsentry.gate":
                    offenders += [
                        f"{path.relative_to(root)}: {a.name}" for a in node.names if a.name in moved
                    ]
    assert offenders == []


MAX_FUNCTION_LINES = 60


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
