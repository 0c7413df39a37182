"""map_in_batches: lax.map's values, with the function traced once (one copy in the program)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax import lax

from approxcv._runtime.batched_map import map_in_batches


@pytest.mark.parametrize("n, batch", [(10, 3), (12, 4), (5, 8), (7, 1), (6, None)])
def test_same_values_as_lax_map_and_one_trace(n, batch):
    xs = (jnp.arange(n * 2.0).reshape(n, 2), jnp.arange(n))
    traces = []

    def f(row):
        traces.append(1)
        x, i = row
        return {"s": jnp.sum(x ** 2) + i, "v": x[::-1] * i}

    got = jax.jit(lambda xs: map_in_batches(f, xs, batch))(xs)
    assert len(traces) == 1
    want = lax.map(f, xs, batch_size=batch)
    for k in ("s", "v"):
        assert got[k].shape == want[k].shape
        np.testing.assert_array_equal(got[k], want[k])


def test_no_module_calls_lax_map_with_a_batch_size_but_map_in_batches():
    """docs/design.md: every batched map goes through map_in_batches."""
    import ast
    from pathlib import Path

    import approxcv
    root = Path(approxcv.__file__).resolve().parent
    found = []
    for path in root.rglob("*.py"):
        if path.relative_to(root).as_posix() == "_runtime/batched_map.py":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                    and node.func.attr == "map"
                    and any(k.arg == "batch_size" for k in node.keywords)):
                found.append(f"{path.relative_to(root)}:{node.lineno}")
    assert found == []
