"""The package's layout: imports run one way (docs/design.md, "Layers").

Walks every module's imports with :mod:`ast` (module level and inside functions alike, so an
import moved into a function to dodge a cycle is still seen) and resolves them to modules of
the package. Importing ``a.b.c`` also runs the ``__init__`` of every package on the way that
is not already being imported (``a.b`` from ``x.y`` runs ``a/__init__`` and ``a/b/__init__``
unless ``x.y`` lies inside them), so those edges count too.
"""
from __future__ import annotations

import ast
from pathlib import Path

import approxcv

ROOT = Path(approxcv.__file__).resolve().parent


def _modules() -> dict[str, Path]:
    out = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _package_of(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _resolve(node: ast.ImportFrom, name: str, path: Path) -> str:
    if not node.level:
        return node.module or ""
    base = _package_of(name, path).split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join(base + ([node.module] if node.module else []))


def _targets(name: str, path: Path, modules) -> set[str]:
    """Modules of the package that ``name`` imports anywhere in its source."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            mod = _resolve(node, name, path)
            found.add(mod)
            found.update(f"{mod}.{a.name}" for a in node.names if f"{mod}.{a.name}" in modules)
    out = set()
    for mod in found:
        if not (mod == "approxcv" or mod.startswith("approxcv.")):
            continue
        while mod not in modules:
            mod = mod.rpartition(".")[0]
        parts = mod.split(".")
        for k in range(1, len(parts) + 1):      # the packages whose __init__ runs first
            anc = ".".join(parts[:k])
            if anc in modules and not (name == anc or name.startswith(anc + ".")):
                out.add(anc)
    out.discard(name)
    return out


def import_graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _targets(name, path, modules) for name, path in modules.items()}


def _cycles(graph) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle():
    assert _cycles(import_graph()) == []


def test_engine_and_inference_never_import_models():
    bad = {(a, b) for a, targets in import_graph().items() for b in targets
           if a.startswith(("approxcv.engine", "approxcv.inference"))
           and b.startswith("approxcv.models")}
    assert bad == set()


def test_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]


#: modules that import parts of approxcv inside functions on purpose: the command line
#: imports the numerics only for the command that needs them (``approxcv --help`` stays
#: light, tests/test_startup.py)
DEFERRED_IMPORTS = {"approxcv.cli.command", "approxcv.cli.args"}


def test_no_import_of_approxcv_inside_a_function():
    """An import inside a function must not hide a cycle: every module of the package
    imports the package's modules at module level (third-party imports may be deferred)."""
    modules = _modules()
    found = []
    for name, path in modules.items():
        if name in DEFERRED_IMPORTS:
            continue
        tree = ast.parse(path.read_text())
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.ImportFrom) and (
                        node.level or (node.module or "").startswith("approxcv")):
                    found.append(f"{name}:{node.lineno}")
                elif isinstance(node, ast.Import) and any(
                        a.name.split(".")[0] == "approxcv" for a in node.names):
                    found.append(f"{name}:{node.lineno}")
    assert found == []


#: the one module that may use JAX's and jaxlib's private API (docs/design.md, "Conventions")
PRIVATE_JAX_MODULE = "approxcv._runtime.workarounds"


def _private_jax(node) -> bool:
    """Whether an import node names ``jax._src`` or a module of jaxlib other than its
    version (jaxlib's modules are JAX's internals)."""
    names = ([a.name for a in node.names] if isinstance(node, ast.Import)
             else [node.module or ""] if not node.level else [])
    return any(n == "jax._src" or n.startswith("jax._src.")
               or (n.startswith("jaxlib.") and n != "jaxlib.version") for n in names)


def test_only_the_workarounds_module_uses_private_jax():
    """``jax._src`` and jaxlib's modules are imported by :data:`PRIVATE_JAX_MODULE` only,
    and no other module names ``_src`` of JAX through an attribute."""
    found = []
    for name, path in _modules().items():
        if name == PRIVATE_JAX_MODULE:
            continue
        source = path.read_text()
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.Import, ast.ImportFrom)) and _private_jax(node):
                found.append(f"{name}:{node.lineno}")
            elif (isinstance(node, ast.Attribute) and node.attr == "_src"
                  and isinstance(node.value, ast.Name) and node.value.id in ("jax", "jaxlib")):
                found.append(f"{name}:{node.lineno}")
    assert found == []
    assert (ROOT / "_runtime" / "workarounds.py").exists()


#: the package's runtime (docs/design.md, "Layers"): one layer, imported by its names
RUNTIME = "approxcv._runtime"
#: what the runtime may import of approxcv outside itself
RUNTIME_BELOW = {"approxcv", "approxcv.errors", "approxcv._validate"}


def _in_runtime(name: str) -> bool:
    return name == RUNTIME or name.startswith(RUNTIME + ".")


def test_the_runtime_imports_nothing_of_approxcv_above_it():
    bad = {(a, b) for a, targets in import_graph().items() for b in targets
           if _in_runtime(a) and not _in_runtime(b) and b not in RUNTIME_BELOW}
    assert bad == set()


def _imports_from_runtime():
    """``(module, imported module, names)`` of every import of the runtime by a module of the
    package outside it; a module that imports the package itself (``from . import _runtime``)
    uses the names it reads from it (``_runtime.install``)."""
    modules = _modules()
    out = []
    for name, path in modules.items():
        if _in_runtime(name):
            continue
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                mod = _resolve(node, name, path)
                if mod == "approxcv" and any(a.name == "_runtime" for a in node.names):
                    out.append((name, RUNTIME, tuple(sorted(
                        n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                        and isinstance(n.value, ast.Name) and n.value.id == "_runtime"))))
                elif _in_runtime(mod):
                    out.append((name, mod, tuple(a.name for a in node.names)))
            elif isinstance(node, ast.Import):
                out.extend((name, a.name, ()) for a in node.names if _in_runtime(a.name))
    return out


def test_the_package_imports_the_runtime_by_the_names_it_exports():
    """Every other module imports ``approxcv._runtime`` itself, never one of its modules,
    and the runtime exports exactly the names the package uses."""
    import approxcv._runtime as runtime
    found = _imports_from_runtime()
    assert [(a, b) for a, b, _ in found if b != RUNTIME] == []
    used = {n for _, _, names in found for n in names}
    assert used == set(runtime.__all__)
    for name in runtime.__all__:
        assert getattr(runtime, name) is not None


def test_the_runtime_names_what_it_looks_up_on_first_use():
    """The names ``approxcv._runtime`` looks up on first use are those its ``TYPE_CHECKING``
    block imports, from the same modules (what this file's import graph sees)."""
    import approxcv._runtime as runtime
    tree = ast.parse((ROOT / "_runtime" / "__init__.py").read_text())
    block = next(n for n in tree.body if isinstance(n, ast.If)
                 and getattr(n.test, "id", None) == "TYPE_CHECKING")
    named = {a.name: node.module for node in block.body for a in node.names}
    assert named == runtime._ON_FIRST_USE


def _layer_rows() -> list[list[str]]:
    """The rows of docs/design.md's "Layers" picture, top first: each row's entries as
    module names or package prefixes (``"approxcv.cli."``, ``"approxcv.api"``)."""
    text = (ROOT.parent / "docs" / "design.md").read_text()
    block = text.split("## Layers\n\n", 1)[1].split("\n\n")[1]    # the picture
    rows, left = [], ""
    for line in block.splitlines():
        if line.startswith(" " * 8) and not line[4:].strip()[:1].isalnum() \
                and not line.strip().startswith("_"):
            continue
        entry = line[4:52].strip()
        if not entry:                          # a continued description
            continue
        left += (" " if left else "") + entry
        if left.endswith(","):                 # the row's entries go on on the next line
            continue
        names = []
        for item in left.split(","):
            item = item.strip().split("  ")[0].split(" (")[0].strip()
            if not item:
                continue
            item = item.replace("<family>/", "")
            names.append("approxcv." + (item[:-1].replace("/", ".") + "." if item.endswith("/")
                                        else item[:-3].replace("/", ".")))
        rows.append(names)
        left = ""
    return rows


def _row_of(module: str, rows) -> int | None:
    """The row of ``module``: its most specific entry (a module before its package)."""
    best, length = None, -1
    for i, row in enumerate(rows):
        for entry in row:
            hit = ((module + ".").startswith(entry) if entry.endswith(".")
                   else module == entry)
            if hit and len(entry) > length:
                best, length = i, len(entry)
    return best


def test_design_md_lists_the_layers_and_no_module_imports_a_row_above_its_own():
    """docs/design.md, "Layers": a module imports only modules on its own row or below
    (rows listed top first; a package's ``__init__`` may gather its own members, as
    ``composite/__init__`` does ``composite/selection.py``); every module of the package but
    its ``__init__`` is on a row."""
    rows = _layer_rows()
    assert len(rows) >= 10 and rows[0] == ["approxcv.cli."], rows
    graph = import_graph()
    unplaced = sorted(m for m in graph if m != "approxcv" and _row_of(m, rows) is None)
    assert not unplaced, f"modules on no row of docs/design.md's Layers: {unplaced}"
    upward = sorted((a, b) for a, targets in graph.items() for b in targets
                    if a != "approxcv" and b != "approxcv"
                    and not b.startswith(a + ".")      # a package's __init__: its members
                    and _row_of(b, rows) < _row_of(a, rows))
    assert not upward, f"imports of a row above the importer's: {upward}"
