"""The executor seam on a Dask cluster: one module-scoped ``LocalCluster`` of two worker
processes serves every test here (starting one costs seconds)."""
import glob
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import approxcv as acv
from approxcv import engine
from approxcv.errors import InvalidArgumentError
from approxcv.executors import run_batches

distributed = pytest.importorskip("distributed")

N, N_FOLDS = 40, 8
OPTS = dict(progress=False, warn=False, exact_batch_size=2)


@pytest.fixture(scope="module")
def client():
    """Two single-threaded worker processes (``processes=True``), as on a real cluster."""
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as c:
        yield c


@pytest.fixture(scope="module")
def ridge_problem():
    """``(model, data, params, folds, in-process exact CV)``: ridge regression on 40 points,
    8-fold CV in 4 batches of 2 folds."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(N, 3))
    data = (X, X @ np.array([1.0, -1.0, 0.5]) + rng.normal(size=N))
    model = acv.models.Ridge(1.0)
    params = model.fit(data)
    folds = acv.folds.kfold(N, N_FOLDS)
    ref = acv.cross_validate(model, data, folds, "exact", params=params, **OPTS)
    return model, data, params, folds, ref


def softplus_objective(u, w, data):
    """``sum_i w_i sum_t log(1 + exp(x_it . u)) + |u|^2 / 2``: structures ``i`` on the
    leading axis of ``data`` (module level, so Dask workers import it)."""
    return jnp.sum(w * jnp.sum(jnp.log1p(jnp.exp(data @ u)), axis=1)) + 0.5 * u @ u


class TracingTask:
    """Task doubling its argument with a jitted function built on the worker; returns
    ``(pid, argument type, traces so far, calls so far, 2 x)``: one object per worker
    means one trace per worker however many batches it runs."""

    def __init__(self):
        self.traces, self.calls, self._double = 0, 0, None

    def __getstate__(self):
        return {**self.__dict__, "_double": None}

    def _traced(self, x):
        self.traces += 1
        return 2.0 * x

    def __call__(self, x):
        if self._double is None:
            self._double = jax.jit(self._traced)
        self.calls += 1
        y = self._double(x)
        return os.getpid(), type(x).__name__, self.traces, self.calls, y


def test_dask_batches_are_numpy_in_order_and_traced_once_per_worker(client):
    outs = run_batches(TracingTask(), [(jnp.full(3, float(i)),) for i in range(8)], client,
                       progress=False)
    assert [o[1] for o in outs] == ["ndarray"] * 8          # JAX arrays travelled as NumPy
    for i, o in enumerate(outs):                               # results in order, as NumPy
        assert type(o[4]) is np.ndarray
        np.testing.assert_array_equal(o[4], 2.0 * i)
    by_worker = {}
    for pid, _, traces, calls, _ in outs:
        by_worker.setdefault(pid, []).append((traces, calls))
    for runs in by_worker.values():
        assert all(traces == 1 for traces, _ in runs)           # traced once per worker
        assert sorted(c for _, c in runs) == list(range(1, len(runs) + 1))  # one object


def test_dask_exact_cv_equals_in_process(client, ridge_problem):
    model, data, params, folds, ref = ridge_problem
    res = acv.cross_validate(model, data, folds, "exact", params=params, executor=client,
                             **OPTS)
    # the same compiled programs on the same inputs agree to the last bit; 1e-12 leaves
    # room for a worker whose CPU differs
    np.testing.assert_allclose(res.fold_loss, ref.fold_loss, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(res.params_flat, ref.params_flat, rtol=1e-10, atol=1e-12)
    unpickles = client.run(lambda: dict(acv.executors.WORKER_UNPICKLES))
    assert all(n == 1 for counts in unpickles.values() for n in counts.values())


def test_dask_select_fits_grid_entries_on_workers_with_checkpoints(client, ridge_problem,
                                                                   tmp_path):
    """One task per grid entry, each checkpointed in its own directory; both entries are the
    reference configuration (compiled on the workers already), so each must reproduce
    in-process exact CV, and a second run resumes from the checkpoints."""
    model, data, params, folds, ref = ridge_problem
    grid = {"a": {"lam": 1.0}, "b": {"lam": 1.0, "fit_intercept": True}}
    kw = dict(executor=client, checkpoint=tmp_path / "ck", **OPTS)
    sel = acv.select(acv.models.Ridge, grid, data, folds, "exact", **kw)
    assert set(sel.table.index) == {"a", "b"}
    assert sorted(p.name for p in (tmp_path / "ck").iterdir()) == ["000-a", "001-b"]
    again = acv.select(acv.models.Ridge, grid, data, folds, "exact", **kw)
    for label in grid:
        assert type(sel.results[label].params_flat) is np.ndarray
        np.testing.assert_allclose(sel.results[label].fold_loss, ref.fold_loss, rtol=1e-10)
        np.testing.assert_array_equal(again.results[label].fold_loss,
                                      sel.results[label].fold_loss)


def test_dask_structure_derivative_batches_equal_one_sweep(client):
    """Structure-level ``(g, H, J)`` accumulated over batches of 3 structures (the last
    padded) on the cluster equal one sweep over all of them in process."""
    data = jnp.asarray(np.random.default_rng(1).normal(size=(7, 4, 3)))
    u = jnp.asarray([0.3, -0.2, 0.1])
    g, h, j = engine.gradient_hessian_jacobian(softplus_objective, u, jnp.ones(7), data, True)
    ga, ha, ja = engine.structure_derivatives(softplus_objective, u, data, 7, batch_size=3,
                                              executor=client)
    for got, want in ((ga, g), (ha, h), (ja, j)):
        assert type(got) is np.ndarray
        np.testing.assert_allclose(got, np.asarray(want), rtol=1e-10, atol=1e-12)


def test_dask_client_without_workers_is_refused():
    with distributed.LocalCluster(n_workers=0, processes=False, dashboard_address=":0") as c, \
            distributed.Client(c) as empty:
        with pytest.raises(InvalidArgumentError, match="`executor` is a Dask Client with no"):
            run_batches(abs, [(1,)], empty, progress=False)


class ExitOnSecondBatch(distributed.WorkerPlugin):
    """Kills its worker process (``os._exit``) as it starts its second task named
    ``<prefix>...`` — once in the whole cluster: the first worker to create ``marker``."""

    def __init__(self, marker: str, prefix: str):
        self.marker, self.prefix, self.started = marker, prefix, 0

    def transition(self, key, start, finish, **kwargs):
        if finish != "executing" or not str(key).startswith(self.prefix):
            return
        self.started += 1
        if self.started < 2:
            return
        try:
            os.close(os.open(self.marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY))
        except FileExistsError:
            return
        os._exit(1)


def test_dask_checkpoint_survives_a_killed_worker(client, ridge_problem, tmp_path):
    """Runs last in this module: it leaves one worker restarting."""
    model, x, params, folds, ref = ridge_problem
    marker, ckpt = str(tmp_path / "killed"), str(tmp_path / "ckpt")
    client.register_plugin(ExitOnSecondBatch(marker, "exact-cv-"), name="exit-once")
    try:
        res = acv.cross_validate(model, x, folds, "exact", params=params, executor=client,
                                 checkpoint=ckpt, **OPTS)
    finally:
        client.unregister_worker_plugin("exit-once")
    assert os.path.exists(marker)                  # a worker did die mid-run
    assert res.diagnostics["exact_cross_starts"] == 0
    ids = np.concatenate([np.load(f)["fold_ids"] for f in glob.glob(ckpt + "/batch-*.npz")])
    np.testing.assert_array_equal(np.sort(ids), np.sort(folds.ids))  # each fold once
    np.testing.assert_allclose(res.fold_loss, ref.fold_loss, rtol=1e-12, atol=1e-12)
