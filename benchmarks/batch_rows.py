"""Exact-CV refits of HMMs: a batch's rows ``vmap``ped vs in sequence (``batch_rows``).

The batched optimisers evaluate the objectives of a batch of refits (folds x starts) either
``vmap``ped — one batched program — or in sequence inside one program (``lax.map``), which
is what HMMs declare on CPU (``HMM.batch_rows = "map"``): a ``vmap``ped forward pass
carries the batch through every time step. This runs exact CV (16 i.i.d. 10 % folds, warm
start only) of a ``PoissonHMM(2)`` on 2,000 call counts and a ``GaussianHMM(3)`` on 1,500
2-D steps both ways in one process: the first call (compile included) and the fastest of
``repeats`` warm calls, and checks that both give the same fold losses. Ratios are the
figures to read (one run, one machine); nothing is asserted.

Usage: python benchmarks/batch_rows.py [--quick]
"""
from __future__ import annotations

import argparse
import os
import sys
import time
import warnings

import numpy as np

import approxcv as acv

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import write_json  # noqa: E402


def _time_exact(model, x, params, folds, repeats):
    runs, res = [], None
    for _ in range(repeats + 1):
        t = time.perf_counter()
        res = acv.cross_validate(model, x, folds, "exact", params=params, progress=False,
                                 restarts=0, warn=False)
        runs.append(time.perf_counter() - t)
    return runs[0], min(runs[1:]), res.fold_loss


def case(name, model, x, folds, repeats):
    from approxcv.models.hmm import HMM
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        params = model.fit(x)
    out, losses = {}, {}
    for rows in ("vmap", "map"):
        HMM.batch_rows = rows          # the class default the optimisers read
        first, warm, losses[rows] = _time_exact(model, x, params, folds, repeats)
        out[rows] = {"first_call_s": round(first, 3), "warm_s": round(warm, 4)}
    HMM.batch_rows = "map"
    out["warm_speedup_map_over_vmap"] = round(out["vmap"]["warm_s"] / out["map"]["warm_s"], 2)
    out["first_call_speedup"] = round(out["vmap"]["first_call_s"]
                                      / out["map"]["first_call_s"], 2)
    out["max_rel_diff_fold_loss"] = float(np.max(np.abs(losses["map"] - losses["vmap"])
                                                 / np.abs(losses["vmap"])))
    print(f"{name}: vmap {out['vmap']}, map {out['map']}: warm "
          f"{out['warm_speedup_map_over_vmap']}x, first call {out['first_call_speedup']}x "
          f"faster in sequence; fold losses agree to {out['max_rel_diff_fold_loss']:.1e}",
          flush=True)
    return out


def main(quick: bool) -> dict:
    repeats = 2 if quick else 5
    n_folds = 8 if quick else 16
    calls = acv.datasets.load_calls(2000)
    rng = np.random.default_rng(0)
    gauss = (rng.normal(size=(1500, 2))
             + np.repeat(np.array([[0.0, 0.0], [2.0, -1.0], [4.0, 1.0]]), 500, 0))
    return {
        "note": "exact CV, warm start only; seconds: first call (compile included) and "
                "fastest warm call; each case both ways in this one process",
        "poisson_hmm_2_T2000": case("PoissonHMM(2), T=2000", acv.models.PoissonHMM(2),
                                    calls, acv.folds.iid(2000, 0.1, n_folds, seed=0),
                                    repeats),
        "gaussian_hmm_3_T1500": case("GaussianHMM(3), T=1500", acv.models.GaussianHMM(3),
                                     gauss, acv.folds.iid(1500, 0.1, n_folds, seed=0),
                                     repeats),
        "machine": {"cpus": os.cpu_count(), "load_average_1min": os.getloadavg()[0]},
    }


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer folds and repeats")
    args = parser.parse_args()
    print(write_json("batch_rows", args.quick, main(args.quick)) + ".json")
