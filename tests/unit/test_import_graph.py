"""The layering of orchestrator/, read from the source with `ast` (nothing is imported).

- the package order (LAYERS, top to bottom, the list docs/architecture.md states): no package
  imports one of a layer above its own, and there is no cycle between packages;
- no import cycle between orchestrator's modules (imports inside functions, and under
  TYPE_CHECKING, count too: a lazy import that dodges a cycle is still the cycle);
- nothing below the CLI imports orchestrator.cli;
- models/ does no I/O: it imports only models/, orchestrator.errors, pydantic and the pure
  standard-library modules of MODELS_STDLIB, and calls no file or process function;
- store/ and report/ do not import runs/.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[2] / "orchestrator"
DOC = PKG.parent / "docs" / "architecture.md"

# The package order, top to bottom: a package (a folder of orchestrator/, or a module at its top)
# imports only packages of the layers below its own; the packages of one layer may import each
# other, without a cycle. docs/architecture.md ("Layers") states the same list, one layer a line.
LAYERS: list[tuple[str, ...]] = [
    ("__main__",),
    ("cli",),
    ("runs",),
    ("telemetry", "isolation", "certs", "migrate", "health", "parse", "diagnostics"),
    ("report",),
    ("provision",),
    ("faults",),
    ("store",),
    ("scheduler",),
    ("workloads",),
    ("metrics",),
    ("lab",),
    ("inventory", "plan", "stacks"),
    ("remote",),
    ("models",),
    ("safefs", "paths", "envpolicy", "text"),
    ("errors", "__init__", "playbooks"),
]

# What models/ may import besides models/ itself: typed values, no I/O. pathlib is here for the
# Path type of fields; calling its I/O methods is refused by MODELS_IO_CALLS below.
MODELS_STDLIB = frozenset(
    {
        "__future__",
        "collections",
        "collections.abc",
        "dataclasses",
        "datetime",
        "enum",
        "functools",
        "ipaddress",
        "math",
        "pathlib",
        "re",
        "typing",
    }
)
# envpolicy: pure functions over a mapping (which environment values may be recorded).
MODELS_ALLOWED_ORCH = frozenset({"orchestrator.errors", "orchestrator.envpolicy"})
MODELS_THIRD_PARTY = ("pydantic",)
# Builtins and methods that reach the filesystem or other processes.
MODELS_IO_CALLS = frozenset(
    {
        "open",
        "input",
        "exists",
        "is_file",
        "is_dir",
        "stat",
        "read_text",
        "read_bytes",
        "write_text",
        "write_bytes",
        "mkdir",
        "iterdir",
        "glob",
        "rglob",
        "unlink",
        "resolve",
        "touch",
        "rename",
        "replace_file",
        "expanduser",
        "home",
        "cwd",
    }
)


def module_name(path: Path) -> str:
    rel = path.relative_to(PKG.parent).with_suffix("")
    parts = list(rel.parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(p): p for p in sorted(PKG.rglob("*.py"))}


def imports(name: str, path: Path, known: set[str]) -> Iterator[str]:
    """Every module `name` imports (absolute names), anywhere in its file. For `from X import Y`,
    Y counts when it is itself a module of orchestrator, else X."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                mod = ".".join(base + ([node.module] if node.module else []))
            else:
                mod = node.module or ""
            subs = [f"{mod}.{a.name}" for a in node.names if f"{mod}.{a.name}" in known]
            yield from subs or [mod]


def graph() -> dict[str, set[str]]:
    mods = modules()
    known = set(mods)
    return {name: set(imports(name, path, known)) for name, path in mods.items()}


def internal(g: dict[str, set[str]]) -> dict[str, set[str]]:
    return {m: {d for d in deps if d in g and d != m} for m, deps in g.items()}


def find_cycle(g: dict[str, set[str]]) -> list[str] | None:
    """One cycle of g as [a, b, ..., a], or None (iterative depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    for root in sorted(g):
        if root in state:
            continue
        path = [root]
        stack = [iter(sorted(g[root]))]
        state[root] = 1
        while stack:
            nxt = next(stack[-1], None)
            if nxt is None:
                state[path.pop()] = 2
                stack.pop()
            elif state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            elif nxt not in state:
                state[nxt] = 1
                path.append(nxt)
                stack.append(iter(sorted(g[nxt])))
    return None


def under(mod: str, pkg: str) -> bool:
    return mod == pkg or mod.startswith(pkg + ".")


def package(mod: str) -> str:
    """The package of a module of orchestrator: its folder, or its own name for a module at the
    top; `__init__` for orchestrator itself."""
    parts = mod.split(".")
    return parts[1] if len(parts) > 1 else "__init__"


def package_graph(g: dict[str, set[str]]) -> dict[str, set[str]]:
    """Package -> the other packages its modules import (g: internal module imports)."""
    out: dict[str, set[str]] = {}
    for m, ds in g.items():
        out.setdefault(package(m), set()).update(package(d) for d in ds if package(d) != package(m))
    return out


def upward(g: dict[str, set[str]], layers: list[tuple[str, ...]]) -> list[str]:
    """Each import of g (internal module imports) from a package into one of a layer above its own."""
    rank = {p: i for i, layer in enumerate(layers) for p in layer}
    return sorted(
        f"{m} imports {d} ({package(m)} is below {package(d)})"
        for m, ds in g.items()
        for d in ds
        if rank[package(d)] < rank[package(m)]
    )


def doc_layers(text: str) -> list[tuple[str, ...]]:
    """The layers the "Layers" section of docs/architecture.md names, top to bottom: its indented
    block, a layer a line (`name/` for a folder, `name.py` for a module; a line further indented
    goes on with the description)."""
    section = text.split("\n## Layers", 1)[1].split("\n## ", 1)[0]
    layers = []
    for line in section.splitlines():
        if line.startswith("    ") and not line.startswith("     "):
            head = re.split(r"\s{2,}", line.strip(), maxsplit=1)[0]
            layers.append(tuple(re.findall(r"([\w]+)(?:/|\.py)", head)))
    return layers


@pytest.fixture(scope="module")
def deps() -> dict[str, set[str]]:
    return graph()


def test_the_graph_is_read(tmp_path: Path) -> None:
    g = internal(graph())
    assert "orchestrator.store.rundir" in g["orchestrator.runs.scale_test"]
    assert "orchestrator.models.base" in g["orchestrator.models.run"]
    # relative imports, a module named in `from pkg import mod`, and imports inside functions
    src = tmp_path / "a.py"
    src.write_text("from . import b\nfrom .c import X\nfrom .. import top\ndef f():\n    import os\n")
    known = {"p.q.a", "p.q.b", "p.q.c", "p.top"}
    assert set(imports("p.q.a", src, known)) == {"p.q.b", "p.q.c", "p.top", "os"}
    assert find_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_the_package_checks_find_what_they_look_for() -> None:
    g = {
        "o.runs.x": {"o.metrics.y", "o.runs.z"},
        "o.runs.z": set(),
        "o.metrics.y": {"o.runs.x", "o.plan"},
        "o.plan": set(),
        "o": set(),
    }
    assert package_graph(g) == {
        "runs": {"metrics"},
        "metrics": {"runs", "plan"},
        "plan": set(),
        "__init__": set(),
    }
    assert find_cycle(package_graph(g)) == ["metrics", "runs", "metrics"]
    layers = [("runs",), ("metrics", "__init__"), ("plan",)]
    assert upward(g, layers) == ["o.metrics.y imports o.runs.x (metrics is below runs)"]
    assert upward(g, [("runs", "metrics"), ("plan", "__init__")]) == []  # one layer: either way
    doc = (
        "# Title\n\n    y/  not a layer\n\n## Layers\n\n"
        "    cli/    the CLI\n    runs/       runs, and\n                  more runs/\n"
        "    a.py, b.py   loaders\n\n## Next\n    x/   not a layer\n"
    )
    assert doc_layers(doc) == [("cli",), ("runs",), ("a", "b")]


def test_no_import_cycle(deps: dict[str, set[str]]) -> None:
    cycle = find_cycle(internal(deps))
    assert cycle is None, "import cycle: " + " -> ".join(cycle or [])


def test_every_package_has_its_place_in_the_order(deps: dict[str, set[str]]) -> None:
    listed = [p for layer in LAYERS for p in layer]
    assert len(listed) == len(set(listed))
    assert sorted({package(m) for m in deps}) == sorted(listed)


def test_no_package_imports_one_above_it(deps: dict[str, set[str]]) -> None:
    """Module-level, function-level and TYPE_CHECKING imports all count."""
    assert upward(internal(deps), LAYERS) == []


def test_no_package_cycle(deps: dict[str, set[str]]) -> None:
    cycle = find_cycle(package_graph(internal(deps)))
    assert cycle is None, "package cycle: " + " -> ".join(cycle or [])


def test_the_doc_states_the_same_order() -> None:
    assert doc_layers(DOC.read_text(encoding="utf-8")) == LAYERS


def test_nothing_below_the_cli_imports_it(deps: dict[str, set[str]]) -> None:
    bad = sorted(
        f"{m} imports {d}"
        for m, ds in deps.items()
        if not under(m, "orchestrator.cli") and m != "orchestrator.__main__"
        for d in ds
        if under(d, "orchestrator.cli")
    )
    assert bad == []


def test_models_do_no_io(deps: dict[str, set[str]]) -> None:
    bad = []
    for m, ds in deps.items():
        if not under(m, "orchestrator.models"):
            continue
        for d in ds:
            ok = (
                under(d, "orchestrator.models")
                or d in MODELS_ALLOWED_ORCH
                or d in MODELS_STDLIB
                or any(under(d, t) for t in MODELS_THIRD_PARTY)
            )
            if not ok:
                bad.append(f"{m} imports {d}")
    for path in (PKG / "models").rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call):
                f = node.func
                called = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
                if called in MODELS_IO_CALLS:
                    bad.append(f"{module_name(path)}:{node.lineno} calls {called}()")
    assert sorted(bad) == []


@pytest.mark.parametrize("pkg", ["orchestrator.store", "orchestrator.report"])
def test_store_and_report_do_not_import_runs(deps: dict[str, set[str]], pkg: str) -> None:
    """Reports are rebuilt from the run directory alone: never from the code that ran it."""
    bad = sorted(
        f"{m} imports {d}"
        for m, ds in deps.items()
        if under(m, pkg)
        for d in ds
        if under(d, "orchestrator.runs")
    )
    assert bad == []


def test_store_keeps_results_only(deps: dict[str, set[str]]) -> None:
    """store/ reads and writes results; submitting, cancelling and running on nodes live elsewhere."""
    outside = ("scheduler", "remote", "faults", "runs", "cli", "lab", "provision")
    bad = sorted(
        f"{m} imports {d}"
        for m, ds in deps.items()
        if under(m, "orchestrator.store")
        for d in ds
        if any(under(d, f"orchestrator.{o}") for o in outside)
    )
    assert bad == []


def test_the_run_holds_no_slurm_words() -> None:
    """Slurm's pending reasons and state words stay inside scheduler/ (scheduler.base.pending_wait
    answers in orch's words), and the run never compares a backend's name (backend_traits)."""
    import re

    from orchestrator.scheduler import base, slurm_state

    words = {
        *base._UNAVAILABLE_REASONS,
        *base._DEPENDENCY_REASONS,
        *(w for w in slurm_state._STATUS if len(w) > 3),
        "Resources",
        "Priority",
        "BeginTime",
        "JobHeldUser",
        "JobHeldAdmin",
    }
    word_re = re.compile(r"\b(" + "|".join(sorted(words)) + r")\b")
    # probe_jobs.py's SlurmProbeJob still reads squeue's state words (requeue, stop): left to the
    # probe jobs' own change (they move onto scheduler.slurm_state.classify), named here so that
    # it is not forgotten.
    later = {"probe_jobs.py"}
    files = sorted(p for p in (PKG / "runs").glob("*.py") if p.name not in later)
    bad = []
    for path in files:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        docstrings = {
            id(n.body[0].value)
            for n in ast.walk(tree)
            if isinstance(n, ast.Module | ast.FunctionDef | ast.ClassDef)
            and n.body
            and isinstance(n.body[0], ast.Expr)
        }
        for node in ast.walk(tree):
            text = node.value if isinstance(node, ast.Constant) and id(node) not in docstrings else None
            if isinstance(text, str) and (m := word_re.search(text)):
                bad.append(f"{path.name}:{node.lineno}: Slurm word {m.group(1)!r} in {text[:60]!r}")
            if isinstance(node, ast.Compare) and path.name in ("scale_test.py", "executor.py"):
                names = [c.value for c in [node.left, *node.comparators] if isinstance(c, ast.Constant)]
                if any(n in ("slurm", "local") for n in names):
                    bad.append(f"{path.name}:{node.lineno}: compares a backend name")
    assert bad == []
