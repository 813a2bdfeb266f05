"""The layers of docs/architecture.md, enforced on the source (ast only, nothing imported).

Bottom up, each layer imports only those below it:

    core (inferledger/core, the inferledger package's __init__, sql/ as data)
      → models (pure logic)
      → ledger (everything that reads or writes the database) and ingest (side by side)
      → app (pages)
      → the composition root (the rest of inferledger/: cli, serve, demo, the stand-in vLLM)

Every import counts, at module level, under TYPE_CHECKING or inside a function: an import moved
into a function still makes the edge (and the cycle) it would make at the top.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from collections.abc import Iterator
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("inferledger", "models", "ledger", "ingest", "app", "sql")

#: layer name → rank; a module may import modules of a strictly lower rank, or of its own layer.
RANK = {"core": 0, "models": 1, "ledger": 2, "ingest": 2, "app": 3, "root": 4}

#: the modules that may import DuckDB: the storage backend, and the SQL console's sandbox, whose
#: worker processes open the read-only snapshot with their own locked-down connection (#14).
STORAGE_BACKEND = frozenset({"inferledger.core.storage", "inferledger.core.sql_sandbox"})


def layer_of(module: str) -> str:
    head = module.split(".")[0]
    if module == "inferledger" or module.startswith("inferledger.core") or head == "sql":
        return "core"
    if head == "inferledger":
        return "root"
    return head


@cache
def modules() -> dict[str, Path]:
    """Every module of ours: dotted name → file."""
    out = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            out[".".join(parts)] = path
    return out


def _imports(path: Path) -> Iterator[tuple[str, int]]:
    """(imported module of ours, line) for every import statement in the file."""
    known = modules()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PACKAGES:
                    yield alias.name, node.lineno
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{path}:{node.lineno}: relative import; write it absolute"
            if not node.module or node.module.split(".")[0] not in PACKAGES:
                continue
            for alias in node.names:
                sub = f"{node.module}.{alias.name}"
                yield (sub if sub in known else node.module), node.lineno


@cache
def graph() -> dict[str, dict[str, int]]:
    """module → {imported module of ours → first line}."""
    out: dict[str, dict[str, int]] = defaultdict(dict)
    for module, path in modules().items():
        for target, line in _imports(path):
            if target != module:
                out[module].setdefault(target, line)
    return out


def test_the_graph_sees_the_packages() -> None:
    # a guard against a test that passes because it finds nothing
    mods = modules()
    assert {"inferledger.core.storage", "ledger.marts", "models.steptime", "app.shell"} <= set(mods)
    assert "inferledger.core.errors" in graph()["ledger.users"]
    assert len(mods) > 100


def test_each_layer_imports_only_layers_below_it() -> None:
    wrong = []
    for module, targets in sorted(graph().items()):
        mine = layer_of(module)
        for target, line in sorted(targets.items()):
            theirs = layer_of(target)
            if theirs != mine and RANK[theirs] >= RANK[mine]:
                path = modules()[module].relative_to(ROOT)
                wrong.append(f"{path}:{line}: {mine} module {module} imports {theirs} {target}")
    assert not wrong, "imports against the layers:\n" + "\n".join(wrong)


def test_no_import_cycles_between_modules() -> None:
    g = graph()
    # Tarjan's strongly connected components, iterative.
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    on_stack: set[str] = set()
    stack: list[str] = []
    cycles: list[list[str]] = []
    counter = 0
    for start in sorted(modules()):
        if start in index:
            continue
        work = [(start, iter(sorted(g.get(start, {}))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in modules():
                    continue
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(g.get(child, {})))))
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
                    cycles.append(sorted(component))
    assert not cycles, "import cycles:\n" + "\n".join(" ↔ ".join(c) for c in cycles)


def test_no_cycles_between_packages() -> None:
    # layers are ranked, so a package cycle would already break the layer test; this names it
    # by package, which is how a newcomer reads docs/architecture.md
    edges = {
        (layer_of(m), layer_of(t))
        for m, targets in graph().items()
        for t in targets
        if layer_of(m) != layer_of(t)
    }
    both = sorted(f"{a} ↔ {b}" for a, b in edges if (b, a) in edges and a < b)
    assert not both, f"package cycles: {both}"


#: DuckDB connection methods that hand out or bind to a cursor (the interface has its own names).
_CURSOR_CALLS = ("cursor", "register", "unregister", "to_arrow_table", "interrupt")


def _duckdb_uses(path: Path) -> Iterator[str]:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            if any(alias.name.split(".")[0] == "duckdb" for alias in node.names):
                yield f"line {node.lineno}: import duckdb"
        elif isinstance(node, ast.ImportFrom):
            if (node.module or "").split(".")[0] == "duckdb":
                yield f"line {node.lineno}: from duckdb import"
        elif isinstance(node, ast.Attribute) and node.attr in _CURSOR_CALLS:
            yield f"line {node.lineno}: .{node.attr}"


def test_only_the_storage_backend_touches_duckdb() -> None:
    """Nothing above the storage interface (bench scripts included) imports duckdb, opens a
    connection or holds a cursor: writes get a Transaction, reads return Arrow or polars. A
    second engine then only needs a second backend. (Replaces "only the gateway opens DuckDB".)"""
    wrong = []
    scripts = {f"bench.{p.stem}": p for p in (ROOT / "bench").glob("*.py")}
    for module, path in sorted({**modules(), **scripts}.items()):
        if module in STORAGE_BACKEND:
            continue
        wrong += [f"{path.relative_to(ROOT)} {use}" for use in _duckdb_uses(path)]
    assert not wrong, "DuckDB used outside the storage backend:\n" + "\n".join(wrong)
    # and each allowed module is found and does use it (the check is not vacuous)
    for module in STORAGE_BACKEND:
        assert list(_duckdb_uses(modules()[module])), module


#: the module that may import clickhouse-connect (and chdb): the ClickHouse event store (#15).
CLICKHOUSE_BACKEND = "inferledger.core.clickhouse"


def _clickhouse_imports(path: Path) -> Iterator[int]:
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        names = []
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            names = [node.module or ""]
        if any(n.split(".")[0] in ("clickhouse_connect", "chdb") for n in names):
            yield node.lineno


def test_only_the_clickhouse_backend_imports_clickhouse_connect() -> None:
    """clickhouse-connect and chdb, like DuckDB, stay behind one module (bench scripts
    included; tests may drive chdb directly)."""
    scripts = {f"bench.{p.stem}": p for p in (ROOT / "bench").glob("*.py")}
    wrong = [
        f"{path.relative_to(ROOT)} line {line}"
        for module, path in sorted({**modules(), **scripts}.items())
        if module != CLICKHOUSE_BACKEND
        for line in _clickhouse_imports(path)
    ]
    assert not wrong, "clickhouse-connect imported outside its backend:\n" + "\n".join(wrong)
    assert list(_clickhouse_imports(modules()[CLICKHOUSE_BACKEND]))
