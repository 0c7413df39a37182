"""approxcv's ``jit``: XLA's fast-compile options for programs on small inputs only."""
import jax
import jax.numpy as jnp
import numpy as np

from approxcv._runtime import compile as _compile


def _program(x, w):
    """A few fused loops and a factorisation: what the tuning programs are made of."""
    a = x.T @ (x * jnp.exp(-jnp.square(w))[:, None]) + jnp.eye(x.shape[1])
    return jnp.sum(jnp.linalg.solve(a, x.T @ w)) + jnp.sum(jnp.tanh(x))


def test_small_inputs_compile_with_the_fast_options_large_ones_without(monkeypatch):
    asked = []
    real = _compile.compiler_options

    def spy(platform="cpu", fast=False, marked=False):
        asked.append((platform, fast))
        return real(platform, fast, marked)
    monkeypatch.setattr(_compile, "compiler_options", spy)
    f = _compile.jit(_program, fast_compile_elements=100)
    rng = np.random.default_rng(0)
    for n in (10, 200):                 # 10 x 4 + 10 = 50 elements; 200 x 4 + 200 = 1,000
        x, w = rng.normal(size=(n, 4)), rng.normal(size=n)
        # the same number as XLA's default options give, to round-off
        np.testing.assert_allclose(float(f(x, w)), float(jax.jit(_program)(x, w)),
                                   rtol=1e-12)
    # (the spy, bound in approxcv, makes the calls bypass the program cache: each size asks
    # for its options marked and unmarked)
    assert list(dict.fromkeys(asked)) == [("cpu", True), ("cpu", False)]
    # a program that does not opt in never gets them
    asked.clear()
    _compile.jit(_program)(x[:10], w[:10])
    assert set(asked) == {("cpu", False)}


def test_the_fast_options_add_to_the_plain_ones():
    plain, fast = _compile.compiler_options("cpu"), _compile.compiler_options("cpu", True)
    if plain is None:                   # an XLA without approxcv's options: its defaults
        assert fast is None
        return
    assert fast == {**plain, **_compile.FAST_COMPILE_OPTIONS} != plain
    assert _compile.compiler_options("gpu", True) is None


def test_array_elements_counts_array_leaves_only():
    tree = ({"a": np.zeros((3, 4)), "b": jnp.ones(5)}, 7, 2.5, None, "x")
    assert _compile.array_elements(tree) == 17
