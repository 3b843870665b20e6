"""The layering of the code, checked: ``tasks -> projectors -> boundary``, never back.

``boundary/`` is the library: importing any of its modules loads no Celery, no ``tasks`` or
``projectors``, no agent SDK (an adapter loads its SDK when its tools are made). Its import
graph, read from the source (imports under ``TYPE_CHECKING`` and inside functions count too),
has no circle, and no module imports another module's private (``_x``) names.

``tasks/`` is in rooms by who runs them, each on a floor; every import points to the same
floor or one below (``TASKS_FLOORS``), and its import graph has no circle:

0. ``settings``, ``exits``, ``runtime``, ``views``: what every room below shares (and
   ``adapters/``, deprecated aliases of ``boundary.adapters`` kept at their old path).
1. ``wiring/``: how a call travels through Celery, for callers and workers alike.
2. ``worker/``: what runs only inside a worker (task bodies, hooks, pool, start-up checks).
3. ``tasks/__init__.py``: ``celery -A tasks``, the app with its tasks and hooks.
4-7. The programs, each its own floor, so that no two import each other: ``mcp_server/``;
   ``web/``; ``demo/`` (serves the web view);
   ``cli/`` (starts every program).

``boundary/`` is on floors too (``BOUNDARY_FLOORS``), bottom up; every import points to the
same floor or one below:

0. the ground: records, errors, limits and their sizes, diagnostics, JSON arguments and
   schemas, the tool-thread bound;
1. what describes a tool and checks a call against it (registry, preflight), telemetry;
2. ``store/``: the canonical store and its Redis implementation, and the formats it reads;
3. what a running call and a limited tool use over the store (call context, progress, flow);
4. the worker's steps (``steps/``), a draining worker's hand-back, re-projection and the
   reaper;
5. the caller's calls: the shared call steps, dispatch, the seal waits, the sync and async
   paths, handles, turns, ``ToolBoundary``;
6. ``boundary/__init__.py``, the package's face;
7. ``adapters/``, built on the face.

A new module of ``tasks/`` or ``boundary/`` must be given a floor here before the test
passes. ``bench/``'s
import graph has no circle either, and no module of ``boundary/``, ``projectors/`` or
``tasks/`` imports ``bench`` or ``tests``.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
#: Top-level packages that no module under ``boundary/`` may load at import time.
FORBIDDEN = (
    "tasks",
    "projectors",
    "celery",
    "kombu",
    "billiard",
    "openai",
    "anthropic",
    "langchain_core",
    "langgraph",
    "pydantic_ai",
    "agents",
    "mcp",
    # The ``otel`` extra's exporter: telemetry imports only ``opentelemetry-api``. (The
    # OpenTelemetry SDK is not listed: redis-py's own observability module imports it
    # whenever it is installed.)
    "prometheus_client",
)
#: Every module of these packages is held to the private-name rule.
PACKAGES = ("boundary", "projectors", "tasks", "bench")

IMPORT_ALL = """
import importlib, pkgutil, sys
import boundary
for module in pkgutil.walk_packages(boundary.__path__, "boundary."):
    importlib.import_module(module.name)
loaded = {name.split(".")[0] for name in sys.modules}
print(" ".join(sorted(loaded & set(sys.argv[1:]))))
"""


def test_importing_every_boundary_module_loads_no_celery_tasks_or_agent_sdk() -> None:
    # Given a fresh interpreter that imports every module under boundary/
    done = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL, *FORBIDDEN],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )

    # Then none of the forbidden packages was loaded
    assert done.stdout.split() == []


# --- The import graph, from the source ------------------------------------------------------


def modules_of(package: str) -> dict[str, Path]:
    """Dotted name -> file, for every module of ``package`` (a folder under the root)."""
    found = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def imports_of(module: str, path: Path) -> Iterator[tuple[str, str | None]]:
    """``(imported module, name taken from it)`` for every import anywhere in the file; the
    name is ``None`` for ``import x``."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, None
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                yield base, alias.name


def graph_of(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules of the same tree it imports (``from p import m`` of a submodule
    ``m`` is an edge to ``p.m``, not to ``p``)."""
    edges: dict[str, set[str]] = {name: set() for name in modules}
    for module, path in modules.items():
        for base, name in imports_of(module, path):
            target = f"{base}.{name}" if f"{base}.{name}" in modules else base
            if target in modules and target != module:
                edges[module].add(target)
    return edges


def circle_in(edges: dict[str, set[str]]) -> list[str] | None:
    """One circle of the graph (its modules in import order), or ``None``."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(edges[node]):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (found := visit(target)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(edges):
        if start not in state and (found := visit(start)) is not None:
            return found
    return None


@pytest.mark.parametrize("package", ["boundary", "tasks", "bench"])
def test_the_import_graph_has_no_circle(package: str) -> None:
    circle = circle_in(graph_of(modules_of(package)))
    assert circle is None, " -> ".join(circle)


def test_the_circle_finder_finds_a_circle() -> None:
    edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circle_in(edges) == ["a", "b", "c", "a"]


def private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def private_imports(checked: dict[str, Path], known: dict[str, Path]) -> Iterator[str]:
    """Each import, by a module of ``checked``, of another module's private name, or of a
    private module from outside the package that holds it (a package's ``_x`` module is
    shared by that package only). ``known``: every module, to tell modules from names."""
    for module, path in checked.items():
        for base, name in imports_of(module, path):
            if name is not None and private(name) and f"{base}.{name}" not in known:
                yield f"{module} imports {name} from {base}"
            named = name is not None and f"{base}.{name}" in known
            parts = (f"{base}.{name}" if named else base).split(".")
            for depth, part in enumerate(parts):
                owner = ".".join(parts[:depth])
                if private(part) and not (module == owner or module.startswith(f"{owner}.")):
                    yield f"{module} imports the private module {'.'.join(parts[: depth + 1])}"


@pytest.mark.parametrize("package", PACKAGES)
def test_no_module_imports_a_private_name_of_another(package: str) -> None:
    known = {name: path for p in PACKAGES for name, path in modules_of(p).items()}
    assert list(private_imports(modules_of(package), known)) == []


# --- tasks/ by floors, bench/ and the packages above the library ----------------------------

#: The floors of ``tasks/``: a module's floor is that of the longest prefix naming it
#: (``tasks`` itself: the package's ``__init__`` only).
TASKS_FLOORS: dict[str, int] = {
    "tasks.settings": 0,
    "tasks.exits": 0,
    "tasks.runtime": 0,
    "tasks.views": 0,
    "tasks.adapters": 0,
    "tasks.wiring": 1,
    "tasks.worker": 2,
    "tasks": 3,
    "tasks.mcp_server": 4,
    "tasks.web": 5,
    "tasks.demo": 6,
    "tasks.cli": 7,
}


def floor_of(module: str, floors: dict[str, int]) -> int | None:
    """The floor of ``module``: its longest prefix in ``floors`` (``None``: not placed)."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        if prefix in floors and (n > 1 or module == prefix):
            return floors[prefix]
    return None


def upward_imports(edges: dict[str, set[str]], floors: dict[str, int]) -> Iterator[str]:
    """Each module without a floor, and each import from a floor to a higher one."""
    for module, targets in sorted(edges.items()):
        floor = floor_of(module, floors)
        if floor is None:
            yield f"{module} has no floor (add it to TASKS_FLOORS)"
            continue
        for target in sorted(targets):
            up = floor_of(target, floors)
            if up is not None and up > floor:
                yield f"{module} (floor {floor}) imports {target} (floor {up})"


def test_every_module_of_tasks_has_a_floor_and_imports_none_above_it() -> None:
    assert list(upward_imports(graph_of(modules_of("tasks")), TASKS_FLOORS)) == []


def test_the_floor_check_finds_an_import_up_and_a_module_without_a_floor() -> None:
    edges = {"tasks.web.app": {"tasks.cli.common"}, "tasks.cli.common": set(), "tasks.x": set()}
    assert list(upward_imports(edges, TASKS_FLOORS)) == [
        "tasks.web.app (floor 5) imports tasks.cli.common (floor 7)",
        "tasks.x has no floor (add it to TASKS_FLOORS)",
    ]


@pytest.mark.parametrize("package", ["boundary", "projectors", "tasks"])
def test_the_library_and_its_programs_import_no_bench_or_tests(package: str) -> None:
    found = [
        f"{module} imports {base}"
        for module, path in modules_of(package).items()
        for base, _ in imports_of(module, path)
        if base.split(".")[0] in ("bench", "tests")
    ]
    assert found == []


#: The floors of ``boundary/``, bottom up (the module docstring says what each holds): a
#: module's floor is that of the longest prefix naming it (``boundary`` itself: the package's
#: ``__init__`` only).
BOUNDARY_FLOORS: dict[str, int] = {
    **dict.fromkeys(
        (
            "boundary.errors",
            "boundary.limits",
            "boundary.record_size",
            "boundary.models",
            "boundary.diagnostics",
            "boundary.fingerprint",
            "boundary.jsonargs",
            "boundary.schema",
            "boundary.tool_threads",
            "boundary.admission",
        ),
        0,
    ),
    **dict.fromkeys(
        ("boundary.registry", "boundary.preflight", "boundary.handover", "boundary.telemetry"), 1
    ),
    **dict.fromkeys(("boundary.store", "boundary.formats"), 2),
    **dict.fromkeys(
        (
            "boundary.call_context",
            "boundary.progress",
            "boundary.flow",
            "boundary.flow_terms",
        ),
        3,
    ),
    **dict.fromkeys(
        ("boundary.steps", "boundary.handback", "boundary.reprojection", "boundary.reaper"), 4
    ),
    **dict.fromkeys(
        (
            "boundary.call_steps",
            "boundary.dispatch",
            "boundary.door",
            "boundary.waits",
            "boundary.sync_calls",
            "boundary.aio_calls",
            "boundary.handle",
            "boundary.turns",
            "boundary.core",
        ),
        5,
    ),
    "boundary": 6,
    "boundary.adapters": 7,
}


def test_every_boundary_module_has_a_floor() -> None:
    assert [m for m in modules_of("boundary") if floor_of(m, BOUNDARY_FLOORS) is None] == []


def test_boundary_imports_no_module_of_a_higher_floor() -> None:
    edges = graph_of(modules_of("boundary"))
    placed = {
        module: targets
        for module, targets in edges.items()
        if floor_of(module, BOUNDARY_FLOORS) is not None
    }
    assert list(upward_imports(placed, BOUNDARY_FLOORS)) == []


def test_the_boundary_floor_check_finds_an_import_up() -> None:
    # The worker's steps build an outcome from a record by the outcome type itself, never
    # through the caller's shared steps (a floor above them).
    edges = {"boundary.steps.project": {"boundary.call_steps"}, "boundary.call_steps": set()}
    assert list(upward_imports(edges, BOUNDARY_FLOORS)) == [
        "boundary.steps.project (floor 4) imports boundary.call_steps (floor 5)"
    ]
