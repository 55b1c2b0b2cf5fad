"""The house rules that keep the layers apart: no Prefect in the library, no import cycles, no arrow back up."""

from __future__ import annotations

import ast
from collections import deque
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "aitp"
PREFECT_ALLOWED = {"aitp/cli/run.py"}

LAYERS: list[tuple[str, ...]] = [
    # foundations: what every other module may lean on
    ("aitp", "aitp.errors", "aitp.atomic", "aitp.processes", "aitp.collector", "aitp.cpu_kernels", "aitp.faults"),
    ("aitp.user_yaml", "aitp.configs", "aitp.disk", "aitp.paired"),
    # what a checkpoint of any kind looks like, and its content id
    ("aitp.checkpoints", "aitp.fingerprint"),
    # the worlds' items and scores, and the rules that keep or drop them
    (
        "aitp.reasoning.tasks",
        "aitp.reasoning.items",
        "aitp.reasoning.prompt",
        "aitp.reasoning.extraction",
        "aitp.reasoning.scoring",
        "aitp.reasoning.groups",
        "aitp.reasoning.filtering",
    ),
    # where data lives
    ("aitp.lake", "aitp.home"),
    # an evaluation as the lake records it; fan-out over Dask
    ("aitp.evals", "aitp.fanout"),
    # language models
    ("aitp.tokenizer", "aitp.policies"),
    # the one seam between the loop engine and a world
    ("aitp.environment",),
    ("aitp.reasoning.rollouts",),
    ("aitp.train",),
    ("aitp.reasoning.evaluate", "aitp.registry"),
    # the worlds: each one's config and Environment
    ("aitp.proving", "aitp.reasoning"),
    # views of the lake an iteration draws
    ("aitp.report", "aitp.viz"),
    ("aitp.loop",),
    # what runs beside the loop or reads its code
    ("aitp.serve", "aitp.serve_limits", "aitp.services", "aitp.service_watch", "aitp.reference"),
    ("aitp.cli", "aitp.__main__"),
]
"""The layers of aitp, lowest first: a module imports from its own layer or from a lower one, never a higher one."""


def _imports(path: Path) -> set[str]:
    """Modules a file imports, at any depth: lazy imports inside functions count, and annotation-only ones under
    `TYPE_CHECKING` too (a type named across a circle is a circle of jobs all the same)."""
    found = set()
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.add(node.module)
            found |= {f"{node.module}.{alias.name}" for alias in node.names}
    return found


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _graph() -> dict[str, set[str]]:
    """Each aitp module and the aitp modules it imports."""
    modules = {_module(p): p for p in PACKAGE.rglob("*.py")}
    return {name: {m for m in _imports(path) if m in modules and m != name} for name, path in modules.items()}


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return sorted(components)


def _loop_through(first: str, members: set[str], graph: dict[str, set[str]]) -> list[str]:
    """A shortest import path from `first` back to itself inside one strongly connected component."""
    came_from: dict[str, str] = {}
    queue = deque([first])
    while queue:
        node = queue.popleft()
        for child in sorted(graph[node] & members):
            if child == first:
                path = [node]
                while path[-1] != first:
                    path.append(came_from[path[-1]])
                return [*reversed(path), first]
            if child not in came_from:
                came_from[child] = node
                queue.append(child)
    return [first]


def _layer(module: str) -> int | None:
    """The index in `LAYERS` of the entry naming `module` or the package holding it (the longest such name)."""
    best, best_len = None, -1
    for number, names in enumerate(LAYERS):
        for name in names:
            matches = module == name or (name != "aitp" and module.startswith(name + "."))
            if matches and len(name) > best_len:
                best, best_len = number, len(name)
    return best


def test_nothing_under_aitp_imports_prefect_but_the_run_command():
    offenders = [
        str(p.relative_to(ROOT))
        for p in PACKAGE.rglob("*.py")
        if str(p.relative_to(ROOT)) not in PREFECT_ALLOWED
        and any(m == "prefect" or m.startswith("prefect.") or m.startswith("flows") for m in _imports(p))
    ]
    assert offenders == []


def test_no_module_of_aitp_imports_another_that_imports_it_back():
    graph = _graph()
    # a package's __init__ re-exporting its own modules is not a cycle of jobs
    cycles = sorted(
        (a, b)
        for a, deps in graph.items()
        for b in deps
        if a < b and a in graph.get(b, set()) and not (b.startswith(a + ".") or a.startswith(b + "."))
    )
    assert cycles == []


def test_no_import_cycle_of_any_length():
    # a package's __init__ re-exporting its own modules is not a cycle of jobs: drop the arrows into them
    graph = {a: {b for b in deps if not b.startswith(a + ".")} for a, deps in _graph().items()}
    loops = [
        " -> ".join(_loop_through(c[0], set(c), graph)) + f"  ({len(c)} modules: {', '.join(c)})"
        for c in _cycles(graph)
    ]
    for loop in loops:
        print("import cycle:", loop)
    assert loops == [], "import cycles (move the shared part into a lower module):\n" + "\n".join(loops)


def test_every_module_of_aitp_has_a_layer():
    unplaced = sorted(m for m in _graph() if _layer(m) is None)
    assert unplaced == [], f"add {unplaced} to LAYERS in tests/test_architecture.py"


def _named(layer: int) -> str:
    return f"layer {layer} ({', '.join(LAYERS[layer])})"


def test_no_module_imports_from_a_higher_layer():
    arrows = sorted(
        f"{a} -> {b}: {_named(_layer(a))} imports {_named(_layer(b))}"
        for a, deps in _graph().items()
        for b in deps
        if _layer(a) is not None and _layer(b) is not None and _layer(b) > _layer(a)
    )
    for arrow in arrows:
        print("upward import:", arrow)
    assert arrows == [], "imports of a higher layer (move the shared part down):\n" + "\n".join(arrows)


def test_the_cycle_finder_finds_a_long_cycle_and_ignores_a_package_reexport():
    graph = {"p": {"p.a"}, "p.a": {"p.b"}, "p.b": {"q"}, "q": {"p.a"}, "r": {"q"}}
    found = _cycles({a: {b for b in deps if not b.startswith(a + ".")} for a, deps in graph.items()})
    assert found == [["p.a", "p.b", "q"]]
    assert _loop_through("p.a", set(found[0]), graph) == ["p.a", "p.b", "q", "p.a"]
