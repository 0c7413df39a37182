"""The seed's study of the time-varying Poisson event model on the shipped call-volume data.

Table 1 layout (Ghosh et al. 2020): T = 10,000, i.i.d. and contiguous folds leaving out
m = 2, 5, 10 %; 10 folds per cell; IJ vs exact CV; mean relative error of the per-point
held-out losses +- 2 sd (sd over the 10 folds' mean errors); scheme A (B with --schemes A,B).
Table 2 layout: T = 5,000, 10,000 and the whole series (27,716): IJ time for 1,000 folds,
NS and exact time for 10 folds (x100 = extrapolated to 1,000 folds), ratios exact/IJ and NS/IJ
from the same run. Appendix-I style NS vs IJ agreement. Scatter figures as PNG.

Exact refits use damped Newton warm-started at the full fit (engine solver "newton"). The
full fits use the model's perturbation restarts (n_perturb=8): without them the fit of the
first 10,000 points ends in a local optimum 19.3 nats above the best one found, exact refits
of some folds jump to that better optimum, and no local approximation can follow them.
Every cell records whether an exact refit reached a lower full-data objective than the fit.
All timings are wall-clock on the machine of this run (shared, 2 cores); what was measured
and what was extrapolated is written next to every number.

Usage: python benchmarks/lwcv_event.py [--quick] [--schemes A] [--out ...]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import time
from pathlib import Path

import numpy as np

import approxcv as acv
from approxcv.models.hmm.time_varying_poisson import TimeVaryingPoisson
from approxcv.report.plot import scatter

HERE = Path(__file__).parent


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def fit(T):
    x = acv.datasets.load_calls(T)
    model = TimeVaryingPoisson(slots_per_day=169, days_per_week=5)
    params, seconds = timed(lambda: model.fit(x))
    r = model.fit_result_
    info = {"T": T, "fit_seconds": seconds, "objective": r["final_objective"],
            "grad_norm": r["final_grad_norm"],
            "best_start_newton_steps": int(r["num_steps"][r["best"]]),
            "starts_objective": r["objective"].tolist(),
            "perturbation_restarts": r["perturbation"],
            "base_rate": float(params.base_rate), "day_effect": params.day_effect.tolist(),
            "excess_shape": float(params.excess_shape), "excess_rate": float(params.excess_rate),
            "transition_matrix": params.transition_matrix.tolist()}
    print(f"fit T={T}: {seconds:.1f}s objective {info['objective']:.2f}", flush=True)
    return model, x, params, info


def per_fold_point_error(df):
    """Mean relative error of the per-point losses of every fold (NaN if a fold failed)."""
    pts = df[df.kind == "point"]
    return pts.groupby("fold_id")["rel_error"].mean().to_numpy()


def mean_2sd(errors):
    """``(mean, 2 sd, number of non-finite folds)`` over the finite per-fold errors."""
    ok = errors[np.isfinite(errors)]
    sd = float(2 * ok.std(ddof=1)) if ok.size > 1 else 0.0
    return float(ok.mean()) if ok.size else float("nan"), sd, int((~np.isfinite(errors)).sum())


def cell(model, x, params, fold_scheme, frac, scheme, n_check, out_dir, tag, seed=0):
    """One Table-1 cell: IJ, NS and exact on the same n_check folds."""
    make = acv.folds.iid if fold_scheme == "iid" else acv.folds.contiguous
    folds = make(len(x), frac, n_check, seed=seed)
    kw = {"params": params, "scheme": scheme, "progress": False, "warn": False}
    ij = acv.cross_validate(model, x, folds, method="ij", **kw)
    ns = acv.cross_validate(model, x, folds, method="ns", **kw)
    ex = acv.cross_validate(model, x, folds, method="exact", **kw)
    cmp_ij, cmp_ns, ij_ns = acv.accuracy(ij, ex), acv.accuracy(ns, ex), acv.accuracy(ij, ns)
    err_ij, err_ns = per_fold_point_error(cmp_ij), per_fold_point_error(cmp_ns)
    ij_mean, ij_2sd, ij_bad = mean_2sd(err_ij)
    ns_mean, ns_2sd, ns_bad = mean_2sd(err_ns)
    ns_ij = per_fold_point_error(ij_ns)
    if out_dir is not None and frac == 0.1:
        scatter(ij, ex, kind="point", path=out_dir / f"lwcv_event_{tag}_{fold_scheme}_"
                f"{scheme}_points.png", title=f"IJ vs exact, {fold_scheme} 10 %, T={len(x)}")
    c = {"T": len(x), "fold_scheme": fold_scheme, "frac": frac, "scheme": scheme,
         "n_folds": n_check,
         "ij_mean_rel_error_point": ij_mean, "ij_rel_error_point_2sd": ij_2sd,
         "ij_nonfinite_folds": ij_bad,
         "ij_rel_error_point_per_fold": err_ij.tolist(),
         "ij_mean_rel_error_fold": cmp_ij.attrs["mean_rel_error_fold"],
         "ns_mean_rel_error_point": ns_mean, "ns_rel_error_point_2sd": ns_2sd,
         "ns_nonfinite_folds": ns_bad,
         "ns_rel_error_point_per_fold": err_ns.tolist(),
         "ns_hessian_min_eig": np.asarray(ns.diagnostics["ns_hessian_min_eig"]).tolist(),
         "ns_vs_ij_mean_rel_diff_point": mean_2sd(ns_ij)[0],
         "ns_vs_ij_rel_diff_point_per_fold": ns_ij.tolist(),
         "exact_converged": bool(np.all(ex.diagnostics["exact_converged"])),
         "exact_newton_steps": ex.diagnostics["exact_num_steps"].tolist(),
         "exact_better_optimum_folds": np.asarray(
             ex.diagnostics.get("better_optimum_folds", [])).tolist(),
         "exact_full_objective_minus_fit": (ex.diagnostics["exact_full_objective"]
                                            - ex.diagnostics["full_objective"]).tolist(),
         "seconds_measured": {"ij": ij.seconds, "ns": ns.seconds, "exact": ex.seconds}}
    print(f"T={len(x)} {scheme} {fold_scheme:10s} {frac:4.0%}: IJ err "
          f"{c['ij_mean_rel_error_point']:.2e} +- {c['ij_rel_error_point_2sd']:.1e}, NS err "
          f"{c['ns_mean_rel_error_point']:.2e} ({ns_bad} NS folds non-finite), exact "
          f"{ex.seconds:.0f}s", flush=True)
    return c


def timing_row(model, x, params, n_ij, n_check, frac=0.1, seed=0):
    """Table-2 row: IJ on n_ij folds, NS and exact on n_check of them, one run."""
    folds = acv.folds.iid(len(x), frac, n_ij, seed=seed)
    sub = folds.subset(np.arange(n_check))
    kw = {"params": params, "progress": False, "warn": False}
    ij_cold = acv.cross_validate(model, x, folds, method="ij", **kw)
    ij = acv.cross_validate(model, x, folds, method="ij", **kw)
    ns = acv.cross_validate(model, x, sub, method="ns", **kw)
    ex = acv.cross_validate(model, x, sub, method="exact", **kw)
    scale = n_ij / n_check
    row = {"T": len(x), "frac": frac, "fold_scheme": "iid", "scheme": "A",
           "ij_n_folds": n_ij, "ij_seconds_measured": ij.seconds,
           "ij_seconds_cold_measured": ij_cold.seconds, "ij_stages": ij.stage_seconds,
           "ns_n_folds_measured": n_check, "ns_seconds_measured": ns.seconds,
           "ns_seconds_extrapolated_to_ij_folds": ns.seconds * scale,
           "exact_n_folds_measured": n_check, "exact_seconds_measured": ex.seconds,
           "exact_seconds_extrapolated_to_ij_folds": ex.seconds * scale,
           "exact_newton_steps": ex.diagnostics["exact_num_steps"].tolist(),
           "exact_converged": bool(np.all(ex.diagnostics["exact_converged"])),
           "ratio_exact_to_ij": ex.seconds * scale / ij.seconds,
           "ratio_ns_to_ij": ns.seconds * scale / ij.seconds}
    sub_ij = acv.cross_validate(model, x, sub, method="ij", **kw)
    row["ij_mean_rel_error_point_on_checked_folds"] = acv.accuracy(
        sub_ij, ex).attrs["mean_rel_error_point"]
    print(f"T={len(x)}: IJ {n_ij} folds {ij.seconds:.2f}s (cold {ij_cold.seconds:.2f}s); NS "
          f"{n_check} folds {ns.seconds:.1f}s; exact {n_check} folds {ex.seconds:.1f}s; "
          f"exact/IJ x{row['ratio_exact_to_ij']:.0f}, NS/IJ x{row['ratio_ns_to_ij']:.0f}",
          flush=True)
    return row


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small smoke run (*_quick.json)")
    ap.add_argument("--schemes", default="A", help="comma-separated schemes for Table 1")
    ap.add_argument("--out", default=None)
    args = ap.parse_args()
    quick = args.quick
    out = Path(args.out or HERE / "results" / ("lwcv_event_quick.json" if quick
                                                else "lwcv_event.json"))
    out.parent.mkdir(parents=True, exist_ok=True)
    png_dir = None if quick else out.parent
    T1 = 1000 if quick else 10_000
    fracs = (0.1,) if quick else (0.02, 0.05, 0.1)
    n_check = 2 if quick else 10
    n_ij = 100 if quick else 1000
    T2 = (1000,) if quick else (5000, 10_000, 27_716)
    n_exact_timing = {27_716: 3} if not quick else {}
    schemes = tuple(s.strip() for s in args.schemes.split(","))
    report = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                          "load_average_at_start": os.getloadavg()},
              "model": "TimeVaryingPoisson(slots_per_day=169, days_per_week=5, "
                       "time_of_day=True)",
              "data": "calls (fpp2), first T points", "exact_solver": "newton (damped, "
              "warm-started at the full fit)", "quick": quick, "fits": {}, "table1": [],
              "table2": [], "reductions": []}
    started = time.perf_counter()
    fitted = {}
    model, x, params, info = fit(T1)
    fitted[T1] = (model, x, params)
    report["fits"][T1] = info
    for scheme in schemes:
        for fold_scheme in ("iid", "contiguous"):
            for frac in fracs:
                report["table1"].append(cell(model, x, params, fold_scheme, frac, scheme,
                                             n_check, png_dir, f"T{T1}"))
    for T in T2:
        if T not in fitted:
            m, xx, pp, info = fit(T)
            fitted[T] = (m, xx, pp)
            report["fits"][T] = info
        k = n_exact_timing.get(T, n_check)
        if k != n_check:
            report["reductions"].append(
                f"T={T}: NS and exact timed on {k} folds instead of {n_check} (time budget); "
                f"the x{n_ij // k} extrapolation to {n_ij} folds is per fold, like the others")
        report["table2"].append(timing_row(*fitted[T], n_ij, k))
    t1_iid = [c for c in report["table1"] if c["fold_scheme"] == "iid"]
    row10 = next((r for r in report["table2"] if r["T"] == T1), report["table2"][-1])
    report["targets"] = {
        "T": row10["T"], "ij_n_folds": n_ij,
        "ij_seconds": row10["ij_seconds_measured"],
        "ij_le_10s": row10["ij_seconds_measured"] <= 10.0,
        "ratio_exact_to_ij": row10["ratio_exact_to_ij"],
        "ratio_ns_to_ij": row10["ratio_ns_to_ij"],
        "max_ij_mean_rel_error_point_iid": max(c["ij_mean_rel_error_point"] for c in t1_iid),
        "ij_mean_rel_error_le_1pct_every_iid_cell": all(
            c["ij_mean_rel_error_point"] <= 0.01 for c in t1_iid),
        "iid_cells_failing_1pct": [f"{c['scheme']} {c['frac']:.0%}" for c in t1_iid
                                   if c["ij_mean_rel_error_point"] > 0.01],
    }
    report["total_seconds"] = time.perf_counter() - started
    out.write_text(json.dumps(report, indent=2, default=float))
    print(json.dumps(report["targets"], indent=2, default=float))


if __name__ == "__main__":
    main()
