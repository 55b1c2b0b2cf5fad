"""The house rules that keep the layers apart: no Prefect in the library, no import cycles."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "aitp"
PREFECT_ALLOWED = {"aitp/cli/run.py"}


def _imports(path: Path) -> set[str]:
    """Modules a file imports, at any depth (lazy imports inside functions count too)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def test_nothing_under_aitp_imports_prefect_but_the_run_command():
    offenders = [
        str(p.relative_to(ROOT))
        for p in PACKAGE.rglob("*.py")
        if str(p.relative_to(ROOT)) not in PREFECT_ALLOWED
        and any(m == "prefect" or m.startswith("prefect.") or m.startswith("flows") for m in _imports(p))
    ]
    assert offenders == []


def test_no_module_of_aitp_imports_another_that_imports_it_back():
    modules = {_module(p): p for p in PACKAGE.rglob("*.py")}
    graph = {name: {m for m in _imports(path) if m in modules and m != name} for name, path in modules.items()}
    # a package's __init__ re-exporting its own modules is not a cycle of jobs
    cycles = sorted(
        (a, b)
        for a, deps in graph.items()
        for b in deps
        if a < b and a in graph.get(b, set()) and not (b.startswith(a + ".") or a.startswith(b + "."))
    )
    assert cycles == []
