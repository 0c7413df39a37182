"""Exact CV in worker processes vs in process: workers compile the refit once, not per batch.

A 2-state Poisson HMM on the first 1,000 call-volume counts, exact CV of 96 i.i.d. folds
leaving out 10 % (two restarts per fold, so 48 batches of 2 folds x 3 starts), run

* ``in_process``: ``executor=None``, first call in the process (compilation included), and
  ``in_process_warm``: the same again;
* ``pool``: a fresh ``ProcessPoolExecutor(2)`` (spawn) through ``cross_validate(...,
  executor=pool)``, worker start-up included, and ``pool_warm``: the same pool again;
* ``pool_per_batch``: a fresh pool where every batch unpickles its own copy of the task
  (what ``executors.run_batches`` did before: each batch retraced and recompiled the refit);
* ``pool_no_cache`` / ``pool_per_batch_no_cache``: the same with the persistent compilation
  cache off in the workers (``APPROXCV_NO_COMPILATION_CACHE=1``), so nothing is loaded from
  disk (``--quick`` skips these).

All modes share one fresh temporary cache directory (``XDG_CACHE_HOME``), filled by the
first in-process run. Ratios are taken within this one run; the machine's core count and
load are recorded, because two workers only help where two cores are free.

Usage: python benchmarks/process_pool.py [--quick]
"""
from __future__ import annotations

import multiprocessing
import os
import sys
import tempfile
import time
import uuid
from concurrent.futures import ProcessPoolExecutor

CACHE_HOME = tempfile.mkdtemp(prefix="approxcv-pool-")
os.environ["XDG_CACHE_HOME"] = CACHE_HOME            # before approxcv is imported
os.environ.pop("APPROXCV_NO_COMPILATION_CACHE", None)
os.environ.pop("JAX_COMPILATION_CACHE_DIR", None)

import numpy as np  # noqa: E402

import approxcv as acv  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import run, write_json  # noqa: E402

T, N_FOLDS, FRAC, WORKERS = 1000, 96, 0.1, 2


class FreshTaskPerBatch:
    """Executor wrapper that gives every submitted batch its own task digest, so each batch
    unpickles a new copy of the task in the worker: the behaviour before tasks were cached
    per worker (a new objective object per batch, hence a retrace and compile per batch)."""

    def __init__(self, executor):
        self.executor = executor

    def submit(self, fn, digest, payload, *args):
        return self.executor.submit(fn, uuid.uuid4().hex, payload, *args)


def pool(no_cache: bool = False) -> ProcessPoolExecutor:
    """A fresh spawn pool of ``WORKERS`` processes (the cache switch is read at import)."""
    if no_cache:
        os.environ["APPROXCV_NO_COMPILATION_CACHE"] = "1"
    try:
        return ProcessPoolExecutor(WORKERS, mp_context=multiprocessing.get_context("spawn"))
    finally:
        os.environ.pop("APPROXCV_NO_COMPILATION_CACHE", None)


def main(quick: bool) -> dict:
    x = acv.datasets.load_calls(T)
    model = acv.models.PoissonHMM(2)
    params = model.fit(x)
    folds = acv.folds.iid(T, FRAC, N_FOLDS // 4 if quick else N_FOLDS, seed=0)

    def exact(executor=None):
        t = time.perf_counter()
        res = acv.cross_validate(model, x, folds, "exact", params=params, progress=False,
                                 executor=executor)
        return res, time.perf_counter() - t

    timings, losses = {}, {}

    def record(name, res, seconds):
        timings[name] = round(seconds, 3)
        losses[name] = res.fold_loss
        print(f"{name:24s} {seconds:8.2f} s", flush=True)

    record("in_process", *exact())
    record("in_process_warm", *exact())
    with pool() as ex:
        record("pool", *exact(ex))
        record("pool_warm", *exact(ex))
    with pool() as ex:
        record("pool_per_batch", *exact(FreshTaskPerBatch(ex)))
    if not quick:
        with pool(no_cache=True) as ex:
            record("pool_no_cache", *exact(ex))
        with pool(no_cache=True) as ex:
            record("pool_per_batch_no_cache", *exact(FreshTaskPerBatch(ex)))
    ref = losses["in_process"]
    ratios = {name: round(s / timings["in_process"], 2) for name, s in timings.items()}
    print("ratios to the first in-process run:", ratios)
    return {"problem": {"model": "PoissonHMM(2)", "data": f"load_calls({T})",
                        "folds": len(folds), "frac": FRAC, "workers": WORKERS,
                        "restarts": 2, "batches": -(-len(folds) // 2)},
            "seconds": timings, "ratio_to_in_process": ratios,
            "max_abs_fold_loss_difference": {k: float(np.max(np.abs(v - ref)))
                                             for k, v in losses.items()},
            "machine": {"cpus": os.cpu_count(), "load_average_1min": os.getloadavg()[0]
                        if hasattr(os, "getloadavg") else None},
            "note": "wall-clock seconds of cross_validate(method='exact'); pool timings "
                    "include starting the workers"}


if __name__ == "__main__":
    def _main(quick):
        print(write_json("process_pool", quick, main(quick)) + ".json")
    run(_main, __doc__)
