"""The house rules of the tree (ARCHITECTURE.md), checked from the code's own imports.

Every import is read, including the deferred ones inside functions, so a lazy import cannot hide an arrow.
Each module belongs to one room; an import between rooms must follow an allowed arrow (command line ->
Locust side -> (socket) -> engine -> providers -> contract; the results and model code read files and import
neither runtime), and no chain of imports may run in a circle.

`python tests/test_layout.py` prints the rooms and the arrows between them.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PACKAGES = ("foundation", "harness", "providers", "scenarios")

# (module prefix, room): the longest matching prefix decides.
ROOMS: tuple[tuple[str, str], ...] = (
    ("foundation", "foundation"),
    ("harness", "harness"),
    ("harness.errors", "errors"),
    ("harness.wire", "wire"),
    ("harness.results", "results"),
    ("harness.rlmodel", "rlmodel"),
    ("harness.engine", "engine"),
    ("harness.locust", "locust"),
    ("harness.cli", "cli"),
    ("harness.fitting", "fitting"),
    ("scenarios", "scenarios"),
    ("providers", "registry"),
    ("providers.base", "contract"),
    ("providers.options", "provider-support"),
    ("providers.vendors.prime.statuses", "provider-support"),
    ("providers.vendors.docker.image", "provider-support"),
    ("providers.vendors.docker.registry", "provider-support"),
    ("providers.cancellation", "provider-support"),
    ("providers.throttle_gate", "provider-support"),
    ("providers.output_clock", "provider-support"),
    ("providers.http1_client", "provider-support"),
    ("providers.http1_transport", "provider-support"),
    ("providers.http1_transport_httpx2", "provider-support"),
    ("providers.preflight", "provider-support"),
    ("providers.vendors.stub", "adapters"),
    ("providers.vendors.prime", "adapters"),
    ("providers.vendors.modal", "adapters"),
    ("providers.vendors.docker", "adapters"),
    ("providers.vendors.e2b", "adapters"),
    ("providers.vendors.daytona", "adapters"),
    ("providers.vendors.runloop", "adapters"),
    ("providers.vendors.vercel", "adapters"),
    ("providers.vendors.coreweave", "adapters"),
    ("providers.vendors.agent_sandbox", "adapters"),
    ("providers.sim", "sim-core"),
    ("providers.sim.core", "sim-core"),
    ("providers.sim.prime", "sim-fronts"),
    ("providers.sim.modal", "sim-fronts"),
    ("providers.sim.e2b", "sim-fronts"),
    ("providers.sim.daytona", "sim-fronts"),
    ("providers.sim.runloop", "sim-fronts"),
    ("providers.sim.vercel", "sim-fronts"),
    ("providers.sim.coreweave", "sim-fronts"),
    ("providers.sim.agent_sandbox", "sim-fronts"),
)

# The ground floor (quantiles, the --help formatter, open-file and collector tuning): every room may import it,
# and it imports nothing of ours.
FOUNDATION = "foundation"

# room -> the rooms it may import (besides itself and the foundation).
_ABOVE_THE_FOUNDATION: dict[str, frozenset[str]] = {
    "errors": frozenset(),
    "harness": frozenset(),
    "contract": frozenset(),
    "provider-support": frozenset({"contract"}),
    "adapters": frozenset({"contract", "provider-support"}),
    "registry": frozenset({"contract"}),  # adapters are looked up by name (importlib), never imported
    "sim-core": frozenset({"contract"}),
    "sim-fronts": frozenset({"sim-core"}),
    "wire": frozenset({"errors", "contract"}),
    "results": frozenset({"wire", "errors"}),
    "rlmodel": frozenset({"results", "wire", "errors"}),
    "engine": frozenset({"wire", "errors", "registry", "contract"}),
    "locust": frozenset({"wire", "errors", "results", "registry", "contract"}),
    "fitting": frozenset({"results", "errors", "sim-core"}),  # issue #31: profiles fitted from runs
    "cli": frozenset(
        {"locust", "results", "rlmodel", "wire", "errors", "registry", "contract", "provider-support", "fitting"}
        | {"sim-core", "sim-fronts"}  # `stampede profiles`, `stub serve`, `modal-local serve`, `daytona-local serve`
    ),
    "scenarios": frozenset({"locust"}),
}
ALLOWED: dict[str, frozenset[str]] = {
    FOUNDATION: frozenset(),
    **{room: rooms | {FOUNDATION} for room, rooms in _ABOVE_THE_FOUNDATION.items()},
}

# Rooms that must not import a runtime they are not part of.
FORBIDDEN_THIRD_PARTY: dict[str, tuple[str, ...]] = {
    "wire": ("gevent", "locust", "asyncio", "aiohttp"),
    "errors": ("gevent", "locust", "asyncio"),
    "engine": ("gevent", "locust"),
    "results": ("gevent", "locust", "asyncio"),
    "rlmodel": ("gevent", "locust", "asyncio"),
    "contract": ("gevent", "locust"),
    "adapters": ("gevent", "locust"),
    FOUNDATION: ("gevent", "locust"),
}

# Within these rooms, sibling modules of different families must not import each other.
SEPARATE_FAMILIES: dict[str, tuple[str, ...]] = {
    "adapters": (
        "providers.vendors.stub",
        "providers.vendors.prime",
        "providers.vendors.modal",
        "providers.vendors.docker",
        "providers.vendors.e2b",
        "providers.vendors.daytona",
        "providers.vendors.runloop",
        "providers.vendors.vercel",
        "providers.vendors.coreweave",
        "providers.vendors.agent_sandbox",
    ),
    "sim-fronts": (
        "providers.sim.prime",
        "providers.sim.modal",
        "providers.sim.e2b",
        "providers.sim.daytona",
        "providers.sim.runloop",
        "providers.sim.vercel",
        "providers.sim.coreweave",
        "providers.sim.agent_sandbox",
    ),
}


@dataclass(frozen=True, slots=True)
class Arrow:
    source: str
    target: str
    line: int


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            found[module_name(path)] = path
    return found


def room_of(module: str) -> str | None:
    best: tuple[int, str] | None = None
    for prefix, room in ROOMS:
        if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > best[0]):
            best = (len(prefix), room)
    return best[1] if best else None


def family_of(module: str, room: str) -> str | None:
    """A family is a module or package and its submodules (`providers.vendors.docker.commands` is docker's), and any
    `<name>_*` sibling module."""
    for family in SEPARATE_FAMILIES.get(room, ()):
        if module == family or module.startswith((family + ".", family + "_")):
            return family
    return None


def imports_of(module: str, path: Path, known: dict[str, Path]) -> Iterator[Arrow]:
    """Every import in the file (top level or deferred), resolved to our modules or a third-party top name."""
    tree = ast.parse(path.read_text(), filename=str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield Arrow(module, alias.name, node.lineno)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            for alias in node.names:
                candidate = f"{base}.{alias.name}"
                yield Arrow(module, candidate if candidate in known else base, node.lineno)


def internal(name: str, known: dict[str, Path]) -> str | None:
    """The longest known module that `name` is (or is inside)."""
    while name:
        if name in known:
            return name
        name = name.rpartition(".")[0]
    return None


def graph() -> tuple[dict[str, Path], list[Arrow], list[Arrow]]:
    known = modules()
    ours: list[Arrow] = []
    theirs: list[Arrow] = []
    for module, path in known.items():
        for arrow in imports_of(module, path, known):
            target = internal(arrow.target, known)
            if target is None:
                theirs.append(arrow)
            elif target != module:
                ours.append(Arrow(module, target, arrow.line))
    return known, ours, theirs


def where(arrow: Arrow, known: dict[str, Path]) -> str:
    return f"{known[arrow.source].relative_to(REPO)}:{arrow.line} imports {arrow.target}"


def test_every_module_has_a_room() -> None:
    known = modules()
    assert [name for name in known if room_of(name) is None] == []


def test_imports_between_rooms_follow_the_allowed_arrows() -> None:
    known, ours, _ = graph()
    wrong = []
    for arrow in ours:
        source, target = room_of(arrow.source), room_of(arrow.target)
        assert source is not None and target is not None
        if source != target and target not in ALLOWED[source]:
            wrong.append(f"{where(arrow, known)} ({source} -> {target})")
        elif source == target and source in SEPARATE_FAMILIES:
            mine, other = family_of(arrow.source, source), family_of(arrow.target, source)
            if mine and other and mine != other:
                wrong.append(f"{where(arrow, known)} ({mine} and {other} must not import each other)")
    assert wrong == []


def test_no_room_imports_a_runtime_it_is_not_part_of() -> None:
    known, _, theirs = graph()
    wrong = []
    for arrow in theirs:
        room = room_of(arrow.source)
        top = arrow.target.partition(".")[0]
        if room is not None and top in FORBIDDEN_THIRD_PARTY.get(room, ()):
            wrong.append(f"{where(arrow, known)} ({room} must not import {top})")
    assert wrong == []


def find_circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(edges.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return circles


def test_no_import_runs_in_a_circle() -> None:
    _, ours, _ = graph()
    edges: dict[str, set[str]] = defaultdict(set)
    for arrow in ours:
        edges[arrow.source].add(arrow.target)
    assert find_circles(edges) == []


def test_the_circle_finder_finds_a_circle() -> None:
    """The check above can fail: a planted circle is found, a chain is not."""
    assert find_circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert find_circles({"a": {"b"}, "b": {"c"}}) == []


def test_the_room_rules_reject_an_upward_arrow() -> None:
    """The engine importing the Locust side is the arrow the whole layout exists to forbid."""
    assert "locust" not in ALLOWED[room_of("harness.engine.server") or ""]
    assert "engine" not in ALLOWED[room_of("harness.locust.session") or ""]
    assert room_of("providers.sim.core.simulator") not in ALLOWED[room_of("providers.vendors.stub") or ""]


def main() -> int:
    known, ours, _ = graph()
    rooms: dict[str, list[str]] = defaultdict(list)
    for name in known:
        rooms[room_of(name) or "?"].append(name)
    arrows: dict[tuple[str, str], int] = defaultdict(int)
    for arrow in ours:
        source, target = room_of(arrow.source), room_of(arrow.target)
        if source != target:
            arrows[(source or "?", target or "?")] += 1
    print(f"{len(known)} modules in {len(rooms)} rooms, {len(ours)} imports between our modules")
    for (source, target), count in sorted(arrows.items()):
        verdict = "ok" if target in ALLOWED.get(source, frozenset()) else "NOT ALLOWED"
        print(f"  {source:>16} -> {target:<16} {count:4d} imports  {verdict}")
    edges: dict[str, set[str]] = defaultdict(set)
    for arrow in ours:
        edges[arrow.source].add(arrow.target)
    circles = find_circles(edges)
    print(f"circles: {len(circles)}" + "".join(f"\n  {' <-> '.join(c)}" for c in circles))
    return 1 if circles or any(t not in ALLOWED.get(s, frozenset()) for s, t in arrows) else 0


def test_the_room_graph_command_in_the_readme_prints_the_graph() -> None:
    """`python tests/test_layout.py` (README, ARCHITECTURE.md) prints the room arrows and exits 0 on a clean tree."""
    result = subprocess.run(
        [sys.executable, "tests/test_layout.py"], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "engine -> wire" in result.stdout and "circles: 0" in result.stdout
    assert "NOT ALLOWED" not in result.stdout


if __name__ == "__main__":
    sys.exit(main())
