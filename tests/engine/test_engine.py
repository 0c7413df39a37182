"""Engine on objectives whose answers are known in closed form."""
import concurrent.futures as cf
import multiprocessing

import jax.numpy as jnp
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from approxcv import engine
from approxcv.errors import CheckpointError, JitterWarning, NotPositiveDefiniteError
from approxcv.folds import Folds
from approxcv.optim import factor_hessian
from approxcv.problem import Problem


class CountingExecutor:
    """An in-process executor that records every task it runs in ``calls``."""

    def __init__(self, calls: list):
        self.calls = calls

    def submit(self, fn, *args):
        self.calls.append(fn)
        fut = cf.Future()
        fut.set_result(fn(*args))
        return fut


def raw_problem(fun, data, u1, n, key="quadratic"):
    """A :class:`Problem` straight from a flat objective (no model); no held-out loss."""
    return Problem(fun, lambda u, w, d: (0.0 * jnp.sum(u), jnp.zeros(n)), data,
                   jnp.asarray(u1), lambda u: u, n, 1.0, None, (key, "A", "within"))


def as_folds(W):
    """Folds left out by the zero entries of each row of ``W``."""
    return Folds([np.flatnonzero(w == 0) for w in W], W.shape[1])


class RawFolds:
    """Folds from 0/1 rows of ``W``, allowing rows that leave nothing out (``w = 1``)."""

    def __init__(self, W):
        self.rows = [np.flatnonzero(w == 0) for w in W]
        self.n, self.ids = W.shape[1], np.arange(len(W))

    def __len__(self):
        return len(self.rows)

    def __getitem__(self, i):
        return self.rows[i]

    def padded(self):
        out = np.full((len(self), max(1, max(map(len, self.rows)))), self.n)
        for i, r in enumerate(self.rows):
            out[i, :len(r)] = r
        return out

    partial = False                     # every removed unit is scored

    @property
    def scored(self):
        return self.rows

    def scored_mask(self):
        return self.padded() < self.n

    def unscored_padded(self):
        return None


def run(name, problem, W, **options):
    """``(fold params, diagnostics)`` of method ``name`` on the folds of ``W``."""
    opts = engine.Options(progress=False, warn=False, **options)
    return engine.get_method(name)[0](problem, RawFolds(W), opts)


def linear_in_w_quadratic(u, w, data):
    """F = 1/2 u'Qu - sum_i w_i b_i'u: theta(w) = Q^{-1} B'w is linear in w, so IJ is exact."""
    Q, B = data
    return 0.5 * u @ Q @ u - jnp.dot(w, B @ u)


def weighted_quadratic(u, w, data):
    """F = sum_i w_i/2 (u - a_i)'Q_i(u - a_i) + 1/2 u'Pu: quadratic in u, so NS is exact."""
    Qs, A, P = data
    r = u[None, :] - A
    return 0.5 * jnp.sum(w * jnp.einsum("id,ide,ie->i", r, Qs, r)) + 0.5 * u @ P @ u


def spd(rng, d, shift=1.0):
    m = rng.normal(size=(d, d))
    return m @ m.T + shift * np.eye(d)


def exact_minimiser_weighted_quadratic(w, Qs, A, P):
    H = np.einsum("i,ide->de", w, Qs) + P
    return np.linalg.solve(H, np.einsum("i,ide,ie->d", w, Qs, A))


def random_folds(rng, n, n_folds):
    W = np.ones((n_folds, n))
    for f in range(n_folds):
        W[f, rng.choice(n, rng.integers(1, n), replace=False)] = 0.0
    return W


@settings(max_examples=10, deadline=None, derandomize=True)
@given(seed=st.integers(0, 10_000), d=st.integers(1, 4), n=st.integers(3, 8))
def test_ij_is_exact_for_objective_linear_in_w(seed, d, n):
    rng = np.random.default_rng(seed)
    Q, B = spd(rng, d), rng.normal(size=(n, d))
    data = (jnp.asarray(Q), jnp.asarray(B))
    u1 = np.linalg.solve(Q, B.sum(0))
    g, H, J = engine.gradient_hessian_jacobian(linear_in_w_quadratic, jnp.asarray(u1),
                                               jnp.ones(n), data, True)
    W = random_folds(rng, n, 4)
    U, _ = run("ij", raw_problem(linear_in_w_quadratic, data, u1, n), W, solver="dense")
    expected = np.linalg.solve(Q, B.T @ W.T).T
    np.testing.assert_allclose(np.asarray(U), expected, rtol=1e-9, atol=1e-9)


@settings(max_examples=5, deadline=None, derandomize=True)   # a compiled program per shape
@given(seed=st.integers(0, 10_000), d=st.integers(1, 4), n=st.integers(3, 8))
def test_newton_step_is_exact_for_quadratic_objective(seed, d, n):
    rng = np.random.default_rng(seed)
    Qs = np.stack([spd(rng, d, 0.1) for _ in range(n)])
    A, P = rng.normal(size=(n, d)), 0.1 * np.eye(d)
    data = tuple(map(jnp.asarray, (Qs, A, P)))
    u1 = exact_minimiser_weighted_quadratic(np.ones(n), Qs, A, P)
    W = random_folds(rng, n, 3)
    U, diag = run("ns", raw_problem(weighted_quadratic, data, u1, n), W, batch_size=2)
    expected = np.stack([exact_minimiser_weighted_quadratic(w, Qs, A, P) for w in W])
    np.testing.assert_allclose(np.asarray(U), expected, rtol=1e-8, atol=1e-9)
    assert np.all(diag["ns_jitter"] == 0.0)
    assert not any(m.any() for m in diag["unreliable"].values())


def test_exact_refits_match_closed_form_and_w1_reproduces_fit():
    rng = np.random.default_rng(0)
    n, d = 6, 3
    Qs = np.stack([spd(rng, d, 0.1) for _ in range(n)])
    A, P = rng.normal(size=(n, d)), 0.1 * np.eye(d)
    data = tuple(map(jnp.asarray, (Qs, A, P)))
    u1 = exact_minimiser_weighted_quadratic(np.ones(n), Qs, A, P)
    W = np.vstack([np.ones(n), random_folds(rng, n, 3)])
    U, diag = run("exact", raw_problem(weighted_quadratic, data, u1, n), W)
    expected = np.stack([exact_minimiser_weighted_quadratic(w, Qs, A, P) for w in W])
    np.testing.assert_allclose(np.asarray(U), expected, rtol=1e-7, atol=1e-8)
    np.testing.assert_allclose(np.asarray(U)[0], u1, atol=1e-10)   # w = 1 reproduces the fit
    assert diag["exact_converged"].all() and not any(m.any() for m in diag["unreliable"].values())


def test_derivatives_match_finite_differences():
    rng = np.random.default_rng(1)
    n, d = 5, 3
    C = rng.normal(size=(n, d))

    def fun(u, w, data):
        return jnp.sum(w * jnp.log1p(jnp.exp(data @ u))) + 0.5 * jnp.sum(u ** 2) * jnp.sum(w ** 2)

    u, w = rng.normal(size=d), rng.uniform(0.5, 1.5, n)
    g, H, J = engine.gradient_hessian_jacobian(fun, jnp.asarray(u), jnp.asarray(w),
                                               jnp.asarray(C), True)
    eps = 1e-6
    num_g = [(fun(u + eps * e, w, C) - fun(u - eps * e, w, C)) / (2 * eps) for e in np.eye(d)]
    np.testing.assert_allclose(np.asarray(g), num_g, rtol=1e-6)
    num_J = np.stack([(engine.gradient(fun, u, w + eps * e, C)
                       - engine.gradient(fun, u, w - eps * e, C)) / (2 * eps)
                      for e in np.eye(n)], axis=1)
    np.testing.assert_allclose(np.asarray(J), num_J, rtol=1e-6, atol=1e-8)
    num_H = np.stack([(engine.gradient(fun, u + eps * e, w, C)
                       - engine.gradient(fun, u - eps * e, w, C)) / (2 * eps) for e in np.eye(d)])
    np.testing.assert_allclose(np.asarray(H), num_H, rtol=1e-6, atol=1e-8)


def test_factor_hessian_records_jitter_for_singular_and_rejects_indefinite():
    with pytest.warns(JitterWarning, match="jitter"):
        f = factor_hessian(np.diag([1.0, 0.0]))
    assert f.jitter > 0 and f.min_eig == 0.0
    with pytest.raises(NotPositiveDefiniteError, match="not positive definite"):
        factor_hessian(np.diag([1.0, -5.0]))
    with pytest.raises(NotPositiveDefiniteError, match="NaN"):
        factor_hessian(np.array([[1.0, np.nan], [np.nan, 1.0]]))
    ok = factor_hessian(np.diag([2.0, 1.0]))
    assert ok.jitter == 0.0 and ok.condition_number == pytest.approx(2.0)


def test_fit_diagnostics_warns_on_inexact_fit():
    from approxcv.errors import InexactFitWarning
    f = factor_hessian(np.eye(2))
    with pytest.warns(InexactFitWarning, match="gradient norm"):
        d = engine.fit_diagnostics(np.array([1.0, 0.0]), f, np.zeros(2))
    assert d["inexact_fit"] and d["grad_norm"] == pytest.approx(1.0)


def _quadratic_problem():
    rng = np.random.default_rng(3)
    n, d = 6, 2
    Qs = np.stack([spd(rng, d, 0.1) for _ in range(n)])
    A, P = rng.normal(size=(n, d)), 0.1 * np.eye(d)
    u1 = exact_minimiser_weighted_quadratic(np.ones(n), Qs, A, P)
    return tuple(map(jnp.asarray, (Qs, A, P))), u1, random_folds(rng, n, 5), (Qs, A, P)


def test_exact_checkpoint_resumes_and_rejects_other_fit(tmp_path):
    data, u1, W, raw = _quadratic_problem()
    path = str(tmp_path / "ck")
    problem = raw_problem(weighted_quadratic, data, u1, W.shape[1])
    folds = as_folds(W)
    opts = dict(progress=False, warn=False, exact_batch_size=1, checkpoint=path)
    exact = engine.get_method("exact")[0]
    first, _ = exact(problem, folds[:3], engine.Options(**opts))
    calls = []
    both, _ = exact(problem, folds, engine.Options(**opts, executor=CountingExecutor(calls)))
    assert len(calls) == 2           # only the two folds not in the checkpoint were refitted
    np.testing.assert_allclose(np.asarray(both)[:3], np.asarray(first))
    expected = np.stack([exact_minimiser_weighted_quadratic(w, *raw) for w in W])
    np.testing.assert_allclose(np.asarray(both), expected, rtol=1e-7, atol=1e-8)
    with pytest.raises(CheckpointError, match="params"):
        exact(problem._replace(u_full=problem.u_full + 1.0), folds, engine.Options(**opts))


@pytest.mark.parametrize("kind", ["thread", "process"])
def test_exact_refits_run_on_concurrent_futures_executors(kind):
    data, u1, W, raw = _quadratic_problem()
    if kind == "thread":
        ex = cf.ThreadPoolExecutor(2)
    else:
        ex = cf.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context("spawn"))
    with ex:
        out, _ = run("exact", raw_problem(weighted_quadratic, data, u1, W.shape[1]), W,
                     exact_batch_size=2, executor=ex)
    expected = np.stack([exact_minimiser_weighted_quadratic(w, *raw) for w in W])
    np.testing.assert_allclose(np.asarray(out), expected, rtol=1e-7, atol=1e-8)


def test_best_of_starts_without_a_converged_start_is_quiet_and_keeps_the_warm_start():
    """A fold whose refits all failed keeps row 0 with zero gap and spread, and computing
    that raises no floating-point warning (inf - inf is masked, not evaluated loudly)."""
    import warnings
    from approxcv.engine.methods.exact import _best_of_starts
    out = {"converged": np.array([False, False, True, True]),
           "objective": np.array([np.nan, np.inf, 5.0, 2.0]),
           "u": np.arange(8.0).reshape(4, 2)}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        rec = _best_of_starts(out, n_folds=2, n_starts=2, scale=1.0)
    np.testing.assert_array_equal(rec["warm_gap"], [0.0, 3.0])
    np.testing.assert_array_equal(rec["start_spread"], [0.0, 3.0])
    np.testing.assert_array_equal(rec["u"], [[0.0, 1.0], [6.0, 7.0]])


def test_a_long_per_fold_stage_runs_in_chunks_with_the_same_losses(monkeypatch):
    """Leave-one-out on a long series: every fold a pass over all the data. Past
    ``PROGRESS_WORK`` the held-out and error-estimate stages run in equal chunks of folds,
    one per core (and a bar with the remaining time); the numbers are those of one call."""
    import approxcv as acv
    from approxcv.engine import batching
    x = np.random.default_rng(4).poisson(np.repeat([2.0, 7.0], 60)).astype(float)
    model = acv.models.PoissonHMM(2)
    params = model.fit(x)
    folds = acv.folds.leave_one_out(120).subset(list(range(0, 114, 3)))   # 38: a partial last chunk
    kw = dict(params=params, warn=False)
    whole = acv.cross_validate(model, x, folds, "ij", progress=False, **kw)
    monkeypatch.setattr(batching, "PROGRESS_WORK", 0)
    assert batching.progress_chunk(len(folds), 4, x) == 4      # 10 calls
    chunked = acv.cross_validate(model, x, folds, "ij", progress=True, batch_size=4, **kw)
    np.testing.assert_allclose(chunked.fold_loss, whole.fold_loss, rtol=1e-12)
    np.testing.assert_allclose(chunked.diagnostics["error_estimate"],
                               whole.diagnostics["error_estimate"], rtol=1e-8, atol=1e-14)


def test_chunks_run_in_threads_land_in_fold_order():
    """:func:`in_chunks` with several workers: the same outputs, in fold order, as one after
    another (chunks finish out of order; the last one is padded)."""
    import time
    from approxcv.engine.batching import in_chunks

    def fn(u, i):
        time.sleep(0.002 * float(np.asarray(i)[0] % 3))    # later chunks may finish first
        return np.asarray(u) * 2.0, np.asarray(i) + 1
    u, i = np.arange(22.0).reshape(11, 2), np.arange(11)
    one = in_chunks(fn, (u, i), 3, "test", progress=False)
    many = in_chunks(fn, (u, i), 3, "test", progress=False, workers=3)
    for a, b in zip(one, many):
        np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(many[1], i + 1)


def test_exact_refits_in_threads_equal_one_batch_after_another(monkeypatch):
    """In process, exact CV runs its batches of refits one per core in threads; the numbers
    are those of one batch after another (``APPROXCV_THREADS=1``)."""
    import approxcv as acv
    from approxcv.executors import host_workers
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    data = (X, X @ np.array([1.0, -1.0, 0.5]) + rng.normal(size=40))
    model = acv.models.Ridge(1.0)
    kw = dict(params=model.fit(data), progress=False, warn=False, exact_batch_size=2)
    folds = acv.folds.kfold(40, 8)                               # 4 batches
    monkeypatch.setenv("APPROXCV_THREADS", "1")
    assert host_workers() == 1
    one = acv.cross_validate(model, data, folds, "exact", **kw)
    monkeypatch.setenv("APPROXCV_THREADS", "3")
    assert host_workers() == 3
    many = acv.cross_validate(model, data, folds, "exact", **kw)
    np.testing.assert_array_equal(many.fold_loss, one.fold_loss)
    np.testing.assert_array_equal(many.params_flat, one.params_flat)
    monkeypatch.setenv("APPROXCV_THREADS", "none")
    with pytest.raises(acv.errors.InvalidArgumentError, match="APPROXCV_THREADS"):
        host_workers()
