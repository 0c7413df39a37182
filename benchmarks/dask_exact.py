"""Exact CV on a Dask cluster of two worker processes vs in process, on the same folds.

A 2-state Poisson HMM on the first 3,000 call-volume counts, exact CV of 96 i.i.d. folds
leaving out 10 % (two restarts per fold: 48 batches of 2 folds x 3 starts), run

* ``in_process``: ``executor=None``; the first call compiles, then ``REPEATS`` warm calls;
* ``dask``: ``executor=Client(LocalCluster(n_workers=2, threads_per_worker=1,
  processes=True))``; the first call makes every worker unpickle the task and compile the
  refit (from the persistent cache the in-process run filled), then ``REPEATS`` warm calls.

The target ratio is in-process warm / Dask warm >= 1.6 (medians of the warm calls). Each
worker runs one task at a time and keeps XLA's Eigen operations on one thread
(``--xla_cpu_multi_thread_eigen=false`` in the workers' ``XLA_FLAGS``), so that the two
workers do not fight over the two cores; the in-process run keeps XLA's defaults. Ratios are
taken within this one run; the machine's core count and load average are recorded, because
two workers only help where two cores are free.

Usage: python benchmarks/dask_exact.py [--quick]
"""
from __future__ import annotations

import os
import statistics
import sys
import time

import numpy as np

import approxcv as acv

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import run, write_json  # noqa: E402

T, N_FOLDS, FRAC, WORKERS, REPEATS = 3000, 96, 0.1, 2, 3
WORKER_XLA_FLAGS = "--xla_cpu_multi_thread_eigen=false"


def timed(fn, repeats: int):
    """``(result of the last call, seconds of the first call, seconds of the next calls)``."""
    seconds = []
    for _ in range(1 + repeats):
        t = time.perf_counter()
        out = fn()
        seconds.append(time.perf_counter() - t)
    return out, seconds[0], seconds[1:]


def main(quick: bool) -> dict:
    from distributed import Client, LocalCluster

    x = acv.datasets.load_calls(T)
    model = acv.models.PoissonHMM(2)
    params = model.fit(x)
    folds = acv.folds.iid(T, FRAC, N_FOLDS // 4 if quick else N_FOLDS, seed=0)
    repeats = 1 if quick else REPEATS

    def exact(executor=None):
        return acv.cross_validate(model, x, folds, "exact", params=params, progress=False,
                                  executor=executor)

    load = {"before": os.getloadavg()}
    local, local_first, local_warm = timed(exact, repeats)
    print(f"in process: first {local_first:.2f} s, warm {local_warm}", flush=True)
    env = {"XLA_FLAGS": " ".join(filter(None, [os.environ.get("XLA_FLAGS"), WORKER_XLA_FLAGS]))}
    t = time.perf_counter()
    with LocalCluster(n_workers=WORKERS, threads_per_worker=1, processes=True,
                      dashboard_address=":0", env=env) as cluster, Client(cluster) as client:
        client.wait_for_workers(WORKERS)
        start = time.perf_counter() - t
        dask, dask_first, dask_warm = timed(lambda: exact(client), repeats)
    print(f"dask: start {start:.2f} s, first {dask_first:.2f} s, warm {dask_warm}", flush=True)
    load["after"] = os.getloadavg()
    ratio = statistics.median(local_warm) / statistics.median(dask_warm)
    print(f"in-process warm / Dask warm: {ratio:.2f}x (target 1.6x)")
    return {"problem": {"model": "PoissonHMM(2)", "data": f"load_calls({T})",
                        "folds": len(folds), "frac": FRAC, "restarts": 2,
                        "batches": -(-len(folds) // 2), "workers": WORKERS,
                        "threads_per_worker": 1, "worker_xla_flags": WORKER_XLA_FLAGS},
            "seconds": {"in_process_first": round(local_first, 3),
                        "in_process_warm": [round(s, 3) for s in local_warm],
                        "cluster_start": round(start, 3),
                        "dask_first": round(dask_first, 3),
                        "dask_warm": [round(s, 3) for s in dask_warm]},
            "ratio_in_process_to_dask_warm": round(ratio, 2), "target_ratio": 1.6,
            "max_abs_fold_loss_difference": float(np.max(np.abs(dask.fold_loss
                                                                - local.fold_loss))),
            "machine": {"cpus": os.cpu_count(), "load_average_1_5_15min": load},
            "note": "wall-clock seconds of cross_validate(method='exact'); ratio of the "
                    "medians of the warm calls"}


if __name__ == "__main__":
    def _main(quick):
        print(write_json("dask_exact", quick, main(quick)) + ".json")
    run(_main, __doc__)
