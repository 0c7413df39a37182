"""Leave-within-structure-out CV of a Poisson HMM on the call-volume series: IJ vs NS vs exact.

For T in {1000, 5000, 10000}, schemes A and B, i.i.d. and contiguous folds leaving out
2/5/10 %: IJ on 1,000 folds; NS and exact CV on 10 of them (their time x100 is the
extrapolated cost of 1,000 folds, as in Ghosh et al. 2020). Also: the ratio of the whole IJ
step to evaluating the same folds' held-out losses at fixed parameters (cold = first call in
the process, compile included; warm = repeated call), and the 2-D Gaussian HMM per-fold cost
at T = 1,500. All timings are measured in this one run; targets are reported, not asserted.

Usage: python benchmarks/lwcv_hmm.py [--quick] [--out benchmarks/results/lwcv_hmm.json]
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import jax.numpy as jnp
import numpy as np

import approxcv as acv
from approxcv.engine import heldout_losses


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def ij_vs_heldout(model, x, params, folds):
    """Whole IJ step vs held-out losses of the same folds at fixed parameters."""
    obj = acv.make_problem(model, x, params)
    W = folds.padded()
    U = jnp.tile(obj.u_full, (len(folds), 1))
    # cold: first calls in the process (compilation included) - the held-out kernel is
    # compiled by the first call, so only its warm time is a fair denominator.
    _, t_fixed_cold = timed(lambda: heldout_losses(obj, U, W))
    cold = acv.cross_validate(model, x, folds, method="ij", params=params, progress=False)
    warm = acv.cross_validate(model, x, folds, method="ij", params=params, progress=False)
    _, t_fixed = timed(lambda: heldout_losses(obj, U, W))
    return {"ij_seconds_cold": cold.seconds, "ij_stages_cold": cold.stage_seconds,
            "heldout_fixed_params_seconds_cold": t_fixed_cold,
            "ij_seconds_warm": warm.seconds, "ij_stages_warm": warm.stage_seconds,
            "heldout_fixed_params_seconds_warm": t_fixed,
            "ratio_ij_to_heldout_warm": warm.seconds / t_fixed}


def cell(model, x, params, fold_scheme, frac, scheme, n_ij, n_check, seed=0):
    make = acv.folds.iid if fold_scheme == "iid" else acv.folds.contiguous
    folds = make(len(x), frac, n_ij, seed=seed)
    sub = folds.subset(np.arange(n_check))
    ij = acv.cross_validate(model, x, folds, method="ij", params=params, scheme=scheme,
                            progress=False)
    ns = acv.cross_validate(model, x, sub, method="ns", params=params, scheme=scheme,
                            progress=False)
    ex = acv.cross_validate(model, x, sub, method="exact", params=params, scheme=scheme,
                            progress=False)
    cmp_ij, cmp_ns = acv.accuracy(ij, ex), acv.accuracy(ns, ex)
    pts = cmp_ij[cmp_ij.kind == "point"]
    per_fold_ij = pts.groupby("fold_id")["rel_error"].mean()
    scale = n_ij / n_check
    return {
        "T": len(x), "fold_scheme": fold_scheme, "frac": frac, "scheme": scheme,
        "n_folds_ij": n_ij, "n_folds_checked": n_check,
        "ij_seconds": ij.seconds, "ij_stages": ij.stage_seconds,
        "ns_seconds_measured": ns.seconds, "ns_seconds_extrapolated": ns.seconds * scale,
        "exact_seconds_measured": ex.seconds, "exact_seconds_extrapolated": ex.seconds * scale,
        "exact_converged": bool(np.all(ex.diagnostics["exact_converged"])),
        "ij_mean_rel_error_point": cmp_ij.attrs["mean_rel_error_point"],
        "ij_rel_error_point_fold_sd": float(per_fold_ij.std(ddof=1)) if len(per_fold_ij) > 1 else 0.0,
        "ij_mean_rel_error_fold": cmp_ij.attrs["mean_rel_error_fold"],
        "ns_mean_rel_error_point": cmp_ns.attrs["mean_rel_error_point"],
        "ns_mean_rel_error_fold": cmp_ns.attrs["mean_rel_error_fold"],
        "ij_vs_ns_mean_rel_diff_point": acv.accuracy(ij, ns).attrs["mean_rel_error_point"],
    }


def gaussian_per_fold(quick):
    """2-D Gaussian HMM, T = 1,500, K = 2: fit time and IJ cost per fold (warm and cold)."""
    x = simulate_gaussian_hmm(1500, seed=0)
    model = acv.models.GaussianHMM(2)
    params, t_fit_cold = timed(lambda: model.fit(x))
    _, t_fit_warm = timed(lambda: model.fit(x))
    folds = acv.folds.iid(len(x), 0.1, 200 if quick else 1000, seed=0)
    cold = acv.cross_validate(model, x, folds, params=params, progress=False)
    warm = acv.cross_validate(model, x, folds, params=params, progress=False)
    return {"T": 1500, "K": 2, "R": 2, "n_folds": len(folds),
            "fit_seconds_cold": t_fit_cold, "fit_seconds_warm": t_fit_warm,
            "ij_ms_per_fold_cold": 1e3 * cold.seconds / len(folds),
            "ij_ms_per_fold_warm": 1e3 * warm.seconds / len(folds),
            "targets": {"ij_ms_per_fold": 10.0, "fit_seconds": 1.5}}


def simulate_gaussian_hmm(T, seed=0):
    """2-D Gaussian HMM, K = 2 sticky states (the seed's T = 1,500 timing problem)."""
    rng = np.random.default_rng(seed)
    z = np.zeros(T, dtype=int)
    for t in range(1, T):
        z[t] = z[t - 1] if rng.random() < 0.95 else 1 - z[t - 1]
    return np.array([[-1.0, 0.5], [1.5, -0.5]])[z] + 0.7 * rng.normal(size=(T, 2))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small smoke run")
    ap.add_argument("--out", default=str(Path(__file__).parent / "results" / "lwcv_hmm.json"))
    args = ap.parse_args()
    Ts = (1000,) if args.quick else (1000, 5000, 10000)
    fracs = (0.1,) if args.quick else (0.02, 0.05, 0.1)
    n_ij, n_check = (100, 3) if args.quick else (1000, 10)
    report = {"machine": {"cpus": 2, "platform": platform.platform()},
              "model": "PoissonHMM(2)", "data": "calls (fpp2), first T points", "cells": [],
              "ij_vs_heldout": {}, "fits": {}}
    for T in Ts:
        x = acv.datasets.load_calls(T)
        model = acv.models.PoissonHMM(2)
        params, t_fit = timed(lambda: model.fit(x))
        report["fits"][T] = {"seconds": t_fit, "grad_norm": float(
            model.fit_result_["grad_norm"][model.fit_result_["best"]])}
        report["ij_vs_heldout"][T] = ij_vs_heldout(
            model, x, params, acv.folds.iid(T, 0.1, n_ij, seed=1))
        for scheme in ("A", "B"):
            for fold_scheme in ("iid", "contiguous"):
                for frac in fracs:
                    c = cell(model, x, params, fold_scheme, frac, scheme, n_ij, n_check)
                    report["cells"].append(c)
                    print(f"T={T} {scheme} {fold_scheme:10s} {frac:.0%}: IJ {c['ij_seconds']:.2f}s "
                          f"err {c['ij_mean_rel_error_point']:.2e}, NS err "
                          f"{c['ns_mean_rel_error_point']:.2e}, exact x{n_ij // n_check} "
                          f"{c['exact_seconds_extrapolated']:.0f}s", flush=True)
    report["gaussian_hmm_T1500"] = gaussian_per_fold(args.quick)
    big = report["ij_vs_heldout"][max(Ts)]
    iid10 = [c for c in report["cells"] if c["fold_scheme"] == "iid" and c["frac"] == 0.1]
    report["targets"] = {
        "T": max(Ts),
        "ij_seconds_cold": big["ij_seconds_cold"], "ij_seconds_warm": big["ij_seconds_warm"],
        "ij_le_5s_cold": big["ij_seconds_cold"] <= 5.0,
        "ratio_ij_to_heldout_warm": big["ratio_ij_to_heldout_warm"],
        "max_ij_mean_rel_error_iid_10pct": max(c["ij_mean_rel_error_point"] for c in iid10),
        "gaussian_ij_ms_per_fold_cold": report["gaussian_hmm_T1500"]["ij_ms_per_fold_cold"],
        "gaussian_ij_ms_per_fold_warm": report["gaussian_hmm_T1500"]["ij_ms_per_fold_warm"],
        "gaussian_fit_seconds_warm": report["gaussian_hmm_T1500"]["fit_seconds_warm"],
    }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2, default=float))
    print(json.dumps(report["targets"], indent=2, default=float))


if __name__ == "__main__":
    main()
