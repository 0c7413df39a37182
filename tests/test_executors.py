"""The executor seam on a Dask cluster: one module-scoped ``LocalCluster`` of two worker
processes serves every test here (starting one costs seconds)."""
import glob
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import approxcv as acv
from approxcv import engine
from approxcv.engine.checkpoint import Checkpoint
from approxcv.errors import ClosedExecutorError, InvalidArgumentError, NoWorkersError
from approxcv.executors import run_batches, worker_grace_seconds

distributed = pytest.importorskip("distributed")

N, N_FOLDS = 40, 8
OPTS = dict(progress=False, warn=False, exact_batch_size=2)
#: a call that has not returned after this long is taken to hang (a liveness bound, no timing)
HANG_SECONDS = 120


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


def checkpointed_ids(path) -> np.ndarray:
    """Fold ids of every batch file of the checkpoint at ``path``, sorted (repeats kept)."""
    return np.sort(np.concatenate(
        [np.load(f)["fold_ids"] for f in glob.glob(str(path) + "/batch-*.npz")] or [[]]))


def test_dask_every_worker_gone_mid_run_raises_and_the_checkpoint_resumes(
        ridge_problem, tmp_path, monkeypatch):
    """``cluster.scale(0)`` once 2 of the 4 batches are checkpointed: the results not yet
    fetched are lost with the worker and wait for one that never comes. The run raises
    NoWorkersError after the grace (2 s here) naming the 4 folds done and the checkpoint
    holding them; with a worker back, the same call refits only the other 4 (each fold
    once in the checkpoint) and equals in-process exact CV."""
    model, data, params, folds, ref = ridge_problem
    monkeypatch.setenv("APPROXCV_WORKER_GRACE", "2")
    ckpt, append = tmp_path / "ckpt", Checkpoint.append
    kw = dict(params=params, checkpoint=ckpt, **OPTS)
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=":0") as cluster, \
            distributed.Client(cluster) as client:
        saved = []

        def append_then_scale_to_zero(self, *args, **kwargs):
            append(self, *args, **kwargs)
            saved.append(args)
            if len(saved) == 2:
                cluster.scale(0)
                for _ in range(600):        # until the scheduler has seen it (at most 30 s)
                    if not client.scheduler_info(n_workers=1)["n_workers"]:
                        break
                    time.sleep(0.05)

        monkeypatch.setattr(Checkpoint, "append", append_then_scale_to_zero)
        guard = ThreadPoolExecutor(1)   # an unbounded wait fails the test instead of hanging it
        run = guard.submit(acv.cross_validate, model, data, folds, "exact", executor=client,
                           **kw)
        guard.shutdown(wait=False)
        with pytest.raises(NoWorkersError, match=r"exact CV stopped with 4 of 8 folds done; "
                           r"the checkpoint .*ckpt' holds them: start workers and rerun the "
                           r"same call, which refits only the 4 missing folds\. every "
                           r"worker of the Dask cluster .* is gone: none for 2 s") as err:
            run.result(timeout=HANG_SECONDS)
        assert (err.value.done, err.value.total) == (4, 8)
        assert len(checkpointed_ids(ckpt)) == 4
        monkeypatch.setattr(Checkpoint, "append", append)
        cluster.scale(1)
        client.wait_for_workers(1, timeout=60)
        res = acv.cross_validate(model, data, folds, "exact", executor=client, **kw)
    np.testing.assert_array_equal(checkpointed_ids(ckpt), np.sort(folds.ids))
    np.testing.assert_allclose(res.fold_loss, ref.fold_loss, rtol=1e-12, atol=1e-12)


def test_closed_dask_client_or_executor_is_refused_by_name(ridge_problem):
    """A closed client is refused before any work by run_batches, exact CV and select (it
    once raised AttributeError while approxcv built its message); so is a shut-down
    ``concurrent.futures`` executor (RuntimeError from submit)."""
    model, data, params, folds, _ = ridge_problem
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=False,
                                  dashboard_address=":0") as cluster:
        client = distributed.Client(cluster)
        client.close()
        calls = {
            "run_batches": lambda: run_batches(abs, [(1,)], client, progress=False),
            "exact": lambda: acv.cross_validate(model, data, folds, "exact", params=params,
                                                executor=client, **OPTS),
            "select": lambda: acv.select(acv.models.Ridge, {"a": {"lam": 1.0}}, data, folds,
                                         "exact", executor=client, **OPTS)}
        for name, call in calls.items():
            with pytest.raises(ClosedExecutorError, match="Dask Client whose status is "
                               "'closed', not 'running'"):
                call()
    pool = ThreadPoolExecutor(1)
    pool.shutdown()
    with pytest.raises(ClosedExecutorError, match=r"`executor` \(ThreadPoolExecutor\) does "
                       "not take tasks"):
        run_batches(abs, [(1,), (2,)], pool, progress=False)


def test_results_reach_on_result_as_they_finish_on_a_concurrent_futures_executor():
    """Batch 0 finishes only after batch 1 has: ``on_result`` (a checkpoint) gets batch 1
    first rather than waiting for batch 0; results still come back in order."""
    second_done = threading.Event()

    def task(i):
        if i == 0:
            assert second_done.wait(HANG_SECONDS)
        return 10 * i

    seen = []

    def on_result(i, out):
        seen.append(i)
        if i == 1:
            second_done.set()

    with ThreadPoolExecutor(2) as pool:
        assert run_batches(task, [(0,), (1,)], pool, progress=False,
                           on_result=on_result) == [0, 10]
    assert seen == [1, 0]


def test_worker_grace_reads_the_environment_and_refuses_nonsense(monkeypatch):
    monkeypatch.delenv("APPROXCV_WORKER_GRACE", raising=False)
    assert worker_grace_seconds() == acv.executors.WORKER_GRACE
    assert worker_grace_seconds(3) == 3.0
    monkeypatch.setenv("APPROXCV_WORKER_GRACE", "inf")
    assert worker_grace_seconds() == float("inf")
    for bad in ("0", "-5", "nan", "soon"):
        monkeypatch.setenv("APPROXCV_WORKER_GRACE", bad)
        with pytest.raises(InvalidArgumentError, match="APPROXCV_WORKER_GRACE must be a "
                           "positive number"):
            worker_grace_seconds()


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
