"""The code blocks of README.md and docs/*.md, checked cheaply (none is run here).

``benchmarks/docs_examples.py`` runs each block as a script and times it; this test only
checks that every ```python block compiles, uses no removed name, and that every
``approxcv`` name it reaches (``from approxcv.x import y``, ``acv.a.b``) exists, so that a
rename in the package fails here and not in a newcomer's paste.
"""
from __future__ import annotations

import ast
import importlib
import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("docs_examples",
                                               REPO / "benchmarks" / "docs_examples.py")
docs_examples = importlib.util.module_from_spec(_spec)
sys.modules.setdefault("docs_examples", docs_examples)     # dataclasses look the module up
_spec.loader.exec_module(docs_examples)

BLOCKS = docs_examples.all_blocks()
REMOVED = ("compare_models",)          # docs/guide.md, "Names that changed"
MARKERS = {"no-run", "skip", "needs", "long"}


def test_docs_have_python_blocks():
    assert len(BLOCKS) >= 10
    assert {b.file for b in BLOCKS} >= {"README.md", "docs/guide.md", "docs/erm.md"}


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.name)
def test_block_compiles(block):
    compile(block.source, f"{block.file}:{block.line}", "exec")
    assert set(block.markers) <= MARKERS, f"{block.name}: unknown marker {block.markers}"


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.name)
def test_block_uses_no_removed_name(block):
    for name in REMOVED:
        assert name not in block.source, f"{block.name} uses the removed {name}"


def _approxcv_aliases(tree: ast.Module) -> dict[str, object]:
    """Names the block binds to approxcv modules or objects, resolved (ImportError fails)."""
    out = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name == "approxcv" or a.name.startswith("approxcv."):
                    mod = importlib.import_module(a.name)
                    if a.asname:
                        out[a.asname] = mod
                    else:
                        out["approxcv"] = importlib.import_module("approxcv")
        elif isinstance(node, ast.ImportFrom) and node.module and (
                node.module == "approxcv" or node.module.startswith("approxcv.")):
            mod = importlib.import_module(node.module)
            for a in node.names:
                assert hasattr(mod, a.name), f"{node.module} has no {a.name}"
                out[a.asname or a.name] = getattr(mod, a.name)
    return out


def _chain(node: ast.Attribute) -> tuple[str, list[str]] | None:
    attrs = []
    while isinstance(node, ast.Attribute):
        attrs.insert(0, node.attr)
        node = node.value
    return (node.id, attrs) if isinstance(node, ast.Name) else None


@pytest.mark.parametrize("block", BLOCKS, ids=lambda b: b.name)
def test_block_names_exist(block):
    """Every ``from approxcv... import`` and every ``alias.a.b`` chain on an approxcv alias."""
    tree = ast.parse(block.source)
    aliases = _approxcv_aliases(tree)
    assigned = {t.id for node in ast.walk(tree) if isinstance(node, (ast.Assign, ast.For))
                for t in ast.walk(node.targets[0] if isinstance(node, ast.Assign)
                                  else node.target) if isinstance(t, ast.Name)}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute) or not isinstance(node.ctx, ast.Load):
            continue
        found = _chain(node)
        if found is None or found[0] not in aliases or found[0] in assigned:
            continue
        obj, path = aliases[found[0]], found[0]
        for attr in found[1]:
            if not (isinstance(obj, type) or type(obj).__name__ == "module"):
                break               # an instance's attribute: not checked statically
            assert hasattr(obj, attr), f"{block.name}: {path} has no attribute {attr!r}"
            obj, path = getattr(obj, attr), f"{path}.{attr}"
