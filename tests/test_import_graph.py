"""The layers, checked from the source: every import points down, and no files import each other in a loop.

Each top-level folder installs as a subpackage of ``agentctx`` and stands on a floor (README, "How it
works"). A file may import its own folder and folders on lower floors only: never a higher floor, never
another folder of its own floor. Between files no import may close a loop. Every import counts, also one
inside a function or under ``TYPE_CHECKING``: a loop that only runs late is still a loop to a reader.

Nothing is imported here: the files are parsed with ``ast``.
"""

from __future__ import annotations

import ast
import tomllib
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

#: folder -> (import name, floor). The agentctx/ folder is the package root: runtime and agents.
FLOORS: dict[str, tuple[str, int]] = {
    "entrypoints": ("agentctx.entrypoints", 7),
    "pipelines": ("agentctx.pipelines", 6),
    "agentctx": ("agentctx", 5),
    "retrieval": ("agentctx.retrieval", 4),
    "serving": ("agentctx.serving", 4),
    "kv_store": ("agentctx.kv_store", 3),
    "kernels": ("agentctx.kernels", 3),
    "common": ("agentctx.common", 1),
}


@dataclass(frozen=True)
class Module:
    name: str  # dotted import name
    folder: str  # top-level folder of the checkout
    path: Path
    rel: str  # path from the checkout root, for messages
    is_package: bool


def modules(repo: Path = REPO) -> dict[str, Module]:
    """Every module of the installed namespace, by import name."""
    out = {}
    for folder, (prefix, _) in FLOORS.items():
        for path in sorted((repo / folder).rglob("*.py")):
            parts = list(path.relative_to(repo / folder).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts = parts[:-1]
            name = ".".join([prefix, *parts])
            out[name] = Module(name, folder, path, str(path.relative_to(repo)), is_package)
    return out


def imports_of(mod: Module, known: dict[str, Module]) -> list[tuple[str, int]]:
    """(imported module of the namespace, line) for every import statement of ``mod``."""
    tree = ast.parse(mod.path.read_text(), str(mod.path))
    package = mod.name if mod.is_package else mod.name.rpartition(".")[0]
    found: dict[tuple[str, int], None] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [(a.name, None) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            names = [(base, a.name) for a in node.names]
        else:
            continue
        for base, name in names:
            # `from pkg import sub` imports the submodule pkg.sub when there is one.
            target = f"{base}.{name}" if name and f"{base}.{name}" in known else base
            while target and target not in known:  # `import agentctx.x.y.z` of a name inside y
                target = target.rpartition(".")[0]
            if target and target != mod.name:
                found[(target, node.lineno)] = None
    return list(found)


def layer_violations(known: dict[str, Module]) -> list[str]:
    bad = []
    for mod in known.values():
        floor = FLOORS[mod.folder][1]
        for target, line in imports_of(mod, known):
            dest = known[target]
            if dest.folder == mod.folder or dest.name == "agentctx":
                continue
            dest_floor = FLOORS[dest.folder][1]
            if dest_floor > floor:
                bad.append(f"{mod.rel}:{line} imports {target} (floor {dest_floor}) from floor "
                           f"{floor}: upward")
            elif dest_floor == floor:
                bad.append(f"{mod.rel}:{line} imports {target}: {mod.folder}/ and "
                           f"{dest.folder}/ share floor {floor}")
    return bad


def cycles(known: dict[str, Module]) -> list[list[str]]:
    """Strongly connected components of more than one file (Tarjan), plus files importing themselves."""
    graph = {name: sorted({t for t, _ in imports_of(m, known)}) for name, m in known.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in graph:
        if v not in index:
            visit(v)
    return found


# ----------------------------------------------------------------------------- the checks
def test_imports_point_down_the_floors():
    bad = layer_violations(modules())
    assert not bad, "imports against the layers:\n" + "\n".join(bad)


def test_no_import_loops_between_files():
    loops = cycles(modules())
    assert not loops, "files that import each other in a loop:\n" + "\n".join(" <-> ".join(c) for c in loops)


def test_the_package_root_stays_light():
    # `import agentctx.kernels` runs agentctx/__init__.py first: it must not pull in Ray or pydantic.
    init = REPO / "agentctx" / "__init__.py"
    tree = ast.parse(init.read_text())
    assert not [n for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))]


def test_every_package_is_listed_for_installation():
    cfg = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]
    listed = set(cfg["packages"])
    packages = {m.name for m in modules().values() if m.is_package}
    assert packages == listed, f"missing: {sorted(packages - listed)}, stale: {sorted(listed - packages)}"
    assert cfg["package-dir"] == {prefix: folder for folder, (prefix, _) in FLOORS.items()}


# ----------------------------------------------------------------------------- the checker itself
def _tree(tmp_path: Path, files: dict[str, str]) -> dict[str, Module]:
    for folder in FLOORS:
        (tmp_path / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / folder / "__init__.py").touch()
    for rel, text in files.items():
        (tmp_path / rel).write_text(text)
    return modules(tmp_path)


def test_the_checker_sees_an_upward_import_a_sideways_one_and_a_loop(tmp_path):
    known = _tree(tmp_path, {
        "kernels/a.py": "def f():\n    from agentctx.serving import engine\n",  # upward, late
        "serving/engine.py": "from agentctx.retrieval.policy import plan\n",  # sideways
        "retrieval/policy.py": "plan = 1\n",
        "kv_store/x.py": "from . import y\n",
        "kv_store/y.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .x import z\n",
        "common/ok.py": "import os\n",
        "pipelines/ok.py": "from agentctx.kernels.a import f\nfrom agentctx.common import ok\n",
    })
    bad = layer_violations(known)
    assert len(bad) == 2
    assert "kernels/a.py:2 imports agentctx.serving.engine (floor 4) from floor 3: upward" in bad[0] + bad[1]
    assert any("serving/ and retrieval/ share floor 4" in b for b in bad)
    assert cycles(known) == [["agentctx.kv_store.x", "agentctx.kv_store.y"]]
