"""approxcv.sklearn against exact leave-one-out and the tools a scikit-learn user would pick.

Writes benchmarks/results/sklearn_alo.json (one process, one machine):

1. LogisticRegressionALO on breast cancer (569 x 30, standardised): its C_ (and with
   ``refine="exact"``) against the exact leave-one-out minimiser (golden-section search in log C over exact LOO, each evaluation
   569 refits by approxcv's exact CV, which matches scikit-learn refits to ~1e-12,
   docs/erm.md), fit times (first fit with compilation, then warm) against
   LogisticRegressionCV(Cs=20, cv=LeaveOneOut()) and bbai's LogisticRegression (if
   installed; in a child process, whose worker keeps part of a core busy while it lives;
   ROUNDS warm fits each, minimum and median), and the exact LOO log-loss at each tool's C.
2. RidgeALO against RidgeCV(alphas=[alpha_], cv=None): the largest difference of the LOO
   values (diabetes, 442 x 10).
3. alo_score against exact leave-one-out refits of the same scikit-learn estimator on data
   sets with n >= 300: mean relative error of the mean LOO loss, mean relative error per
   sample, and the number of unreliable samples.
4. ALOSearchCV over five C values, then over five others (first in the process: the first
   search compiles, the second reuses every program).
5. RidgeALO on wide designs (p > n): the n x n dual search against the general (primal)
   search on 30 x 400 (the primal's first fit, with compilation, and a warm one; the ratio
   of the warm times), the largest relative difference of their grids' ALOOCV, and the dual
   alone on 30 x 2,000 (the primal did not finish in 20 minutes there).

Usage: python benchmarks/sklearn_alo.py [--lrcv-n N] [--only ridge_wide]  (LogisticRegressionCV
on the first N samples of a shuffled breast cancer: it refits 20 x n models; default: all
569; ``--only ridge_wide`` runs section 5 alone and updates its entry of the JSON).
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
import warnings
from pathlib import Path

import numpy as np
from scipy.special import gammaln
from sklearn.base import clone
from sklearn.datasets import load_breast_cancer, load_diabetes
from sklearn.linear_model import (ElasticNet, LogisticRegression, LogisticRegressionCV,
                                  PoissonRegressor, Ridge, RidgeCV)
from sklearn.model_selection import LeaveOneOut
from sklearn.preprocessing import StandardScaler

import approxcv as acv
from approxcv.models import Logistic
from approxcv.sklearn import LogisticRegressionALO, RidgeALO, alo_score

OUT = Path(__file__).resolve().parent / "results" / "sklearn_alo.json"


def exact_loo_logloss(X, y, C):
    """Mean exact LOO log-loss of L2 logistic regression at ``C`` (approxcv exact refits)."""
    model = Logistic(1.0 / C)
    res = acv.cross_validate(model, (X, y), acv.folds.leave_one_out(len(y)), "exact",
                             progress=False)
    return float(np.mean(res.fold_loss))


def golden_section(f, lo, hi, rtol):
    """Minimise ``f`` over ``[lo, hi]`` (log scale) to ``hi / lo - 1 <= rtol``."""
    g = (np.sqrt(5) - 1) / 2
    a, b = np.log(lo), np.log(hi)
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = f(np.exp(c)), f(np.exp(d))
    evals = 2
    while b - a > np.log1p(rtol):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = f(np.exp(c))
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = f(np.exp(d))
        evals += 1
    return float(np.exp((a + b) / 2)), evals


def timed(fn, repeat=1):
    best = np.inf
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        best = min(best, time.perf_counter() - t)
    return out, best


#: warm fits timed per tool (the minimum is reported, and the median)
ROUNDS = 15


def warm_times(fn, rounds=ROUNDS):
    """``(min, median)`` seconds of ``rounds`` calls of ``fn``."""
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return float(np.min(times)), float(np.median(times))


def bbai_fits():
    """bbai's LogisticRegression on the same data: first fit, then warm fits; a dict."""
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    try:
        from bbai.glm import LogisticRegression as BBAILogistic
    except ImportError as exc:
        return {"bbai": f"unavailable: {exc}"}
    bb = BBAILogistic().fit(X, y)
    out = {"bbai_C": float(np.ravel(bb.C_)[0])}
    out["bbai_warm_fit_seconds"], out["bbai_warm_fit_median_seconds"] = warm_times(
        lambda: BBAILogistic().fit(X, y))
    # bbai's worker process outlives its parent, busy (about 70 % to 100 % of a core)
    from bbai._computation import _bridge
    _bridge.handle.kill()
    return out


def bbai_in_child():
    """:func:`bbai_fits` in a child process: bbai's worker process, once started, keeps
    70-100 % of a core busy (even after its parent exits: the child kills it), which would
    slow every later measurement of this one."""
    run = subprocess.run([sys.executable, __file__, "--bbai-only"], capture_output=True,
                         text=True, check=True)
    return json.loads(run.stdout.strip().splitlines()[-1])


def breast_cancer(lrcv_n):
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    out = {"n": int(len(y)), "p": int(X.shape[1])}
    t = time.perf_counter()
    est = LogisticRegressionALO().fit(X, y)
    out["alo_first_fit_seconds"] = time.perf_counter() - t
    out["warm_fit_rounds"] = ROUNDS
    out["alo_warm_fit_seconds"], out["alo_warm_fit_median_seconds"] = warm_times(
        lambda: LogisticRegressionALO().fit(X, y))
    out["alo_C"] = est.C_
    out["alo_score"] = est.alo_score_
    out["alo_unreliable"] = int(len(est.unreliable_))
    cache = {}

    def f(C):
        if C not in cache:
            cache[C] = exact_loo_logloss(X, y, C)
        return cache[C]
    t = time.perf_counter()
    c_star, evals = golden_section(f, est.C_ / 4, est.C_ * 4, 1e-4)
    out["exact_loo_C"] = c_star
    out["golden_section_evaluations"] = evals
    out["golden_section_seconds"] = time.perf_counter() - t
    out["C_relative_difference"] = abs(est.C_ - c_star) / c_star
    out["exact_loo_at_alo_C"] = f(est.C_)
    out["exact_loo_at_exact_C"] = f(c_star)
    out["alo_score_relative_error"] = abs(est.alo_score_ - f(est.C_)) / f(est.C_)
    # refine="exact": from ALOOCV's C on to exact LOO's minimiser (first fit compiles the
    # refits; then warm, least of 3)
    t = time.perf_counter()
    ref = LogisticRegressionALO(refine="exact").fit(X, y)
    out["refine_exact_first_fit_seconds"] = time.perf_counter() - t
    _, out["refine_exact_warm_fit_seconds"] = timed(
        lambda: LogisticRegressionALO(refine="exact").fit(X, y), 3)
    out["refine_exact_C"] = ref.C_
    out["refine_exact_evaluations"] = int((ref.alo_path_["stage"] == "exact").sum())
    out["refine_exact_C_relative_difference"] = abs(ref.C_ - c_star) / c_star
    out["refine_exact_loo"] = ref.exact_loo_score_
    bbai = bbai_in_child()
    out.update(bbai)
    if "bbai_C" in bbai:
        out["exact_loo_at_bbai_C"] = f(out["bbai_C"])
        out["alo_fit_over_bbai"] = out["alo_warm_fit_seconds"] / out["bbai_warm_fit_seconds"]
        out["alo_fit_over_bbai_medians"] = (out["alo_warm_fit_median_seconds"]
                                            / out["bbai_warm_fit_median_seconds"])
    rng = np.random.default_rng(0)
    idx = rng.permutation(len(y))[:lrcv_n]
    Xs, ys = X[idx], y[idx]
    out["lrcv_n"] = int(len(idx))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lrcv, out["lrcv_fit_seconds"] = timed(
            lambda: LogisticRegressionCV(Cs=20, cv=LeaveOneOut(), scoring="neg_log_loss",
                                         max_iter=1000).fit(Xs, ys))
    _, alo_sub = timed(lambda: LogisticRegressionALO().fit(Xs, ys), 1)   # compile
    _, out["alo_fit_seconds_on_lrcv_data"] = timed(
        lambda: LogisticRegressionALO().fit(Xs, ys), 3)
    out["lrcv_over_alo"] = out["lrcv_fit_seconds"] / out["alo_fit_seconds_on_lrcv_data"]
    if lrcv_n == len(y):
        out["lrcv_over_refine_exact"] = (out["lrcv_fit_seconds"]
                                         / out["refine_exact_warm_fit_seconds"])
    out["lrcv_C"] = float(np.ravel(lrcv.C_)[0])
    if lrcv_n == len(y):
        out["exact_loo_at_lrcv_C"] = f(out["lrcv_C"])
    return out


def ridge_vs_ridgecv():
    X, y = load_diabetes(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    est = RidgeALO().fit(X, y)
    rcv = RidgeCV(alphas=[est.alpha_], store_cv_results=True).fit(X, y)
    diff = np.abs(2 * est.cv_result_.fold_loss - rcv.cv_results_[:, 0])
    grp = RidgeALO(penalty_groups=[0, 0, 0, 0, 1, 1, 1, 1, 1, 1]).fit(X, y)
    return {"n": int(len(y)), "alpha_": est.alpha_,
            "max_abs_diff_loo_values": float(diff.max()),
            "max_rel_diff_loo_values": float((diff / rcv.cv_results_[:, 0]).max()),
            "alo_score": est.alo_score_, "grouped_alpha_": np.ravel(grp.alpha_).tolist(),
            "grouped_alo_score": grp.alo_score_}


def _sq(e, x, y):
    return (e.predict(x) - y) ** 2


def _logloss(e, x, y):
    return -np.log(e.predict_proba(x)[np.arange(len(y)), y])


def _poisson_nll(e, x, y):
    mu = e.predict(x)
    return mu - y * np.log(mu) + gammaln(y + 1.0)


def _exact_loo(est, X, y, loss):
    return np.array([loss(clone(est).fit(X[tr], y[tr]), X[te], y[te])[0]
                     for tr, te in LeaveOneOut().split(X)])


def alo_vs_exact():
    rows = []
    bc_X, bc_y = load_breast_cancer(return_X_y=True)
    bc_X = StandardScaler().fit_transform(bc_X)
    db_X, db_y = load_diabetes(return_X_y=True)
    db_X = StandardScaler().fit_transform(db_X)
    calls = acv.datasets.load_calls(n=600, as_frame=True)
    t = 2 * np.pi * calls["slot"].to_numpy() / 169
    c_X = np.column_stack([np.sin(k * t) for k in (1, 2, 3)] +
                          [np.cos(k * t) for k in (1, 2, 3)])
    c_y = calls["calls"].to_numpy().astype(float)
    p_X, p_y = acv.datasets.load_pima()
    p_X, p_y = StandardScaler().fit_transform(p_X), (np.asarray(p_y) > 0).astype(int)
    tight = dict(tol=1e-12, max_iter=100000)
    cases = [
        ("breast_cancer", LogisticRegression(C=1.0, **tight), bc_X, bc_y, _logloss),
        ("breast_cancer_weak", LogisticRegression(C=10.0, **tight), bc_X, bc_y, _logloss),
        ("diabetes_elastic_net", ElasticNet(alpha=0.1, l1_ratio=0.5, **tight), db_X, db_y,
         _sq),
        ("diabetes_ridge", Ridge(alpha=10.0), db_X, db_y, _sq),
        ("calls_poisson", PoissonRegressor(alpha=1e-3, **tight), c_X, c_y, _poisson_nll),
        ("pima", LogisticRegression(C=1.0, **tight), p_X, p_y, _logloss),
    ]
    for name, est, X, y, loss in cases:
        out, secs = timed(lambda: alo_score(est, X, y))
        exact, exact_secs = timed(lambda: _exact_loo(est, X, y, loss))
        scale = 2.0 if loss is _sq else 1.0
        approx = scale * np.asarray(out.cv_result.fold_loss)
        rows.append({"data": name, "estimator": repr(est), "n": int(len(y)),
                     "alo_mean_loss": out.mean_loss, "exact_mean_loss": float(exact.mean()),
                     "relative_error_of_mean": abs(out.mean_loss - exact.mean()) / exact.mean(),
                     "mean_relative_error_per_sample":
                         float(np.mean(np.abs(approx - exact) / np.maximum(exact, 1e-12))),
                     "n_unreliable": out.n_unreliable, "alo_seconds_first_call": secs,
                     "exact_refit_seconds": exact_secs})
    return rows


def search_over_c():
    """ALOSearchCV over five C values of LogisticRegression on breast cancer, then over five
    other values: the second search compiles nothing (the penalty weight is an argument of
    the programs), so it shows the search's own cost."""
    from approxcv.sklearn import ALOSearchCV
    X, y = load_breast_cancer(return_X_y=True)
    X = StandardScaler().fit_transform(X)
    out = {}
    for name, grid in (("first", [0.01, 0.1, 1.0, 10.0, 100.0]),
                       ("new_values", [0.02, 0.2, 2.0, 20.0, 200.0])):
        t = time.perf_counter()
        search = ALOSearchCV(LogisticRegression(max_iter=1000), {"C": grid}).fit(X, y)
        out[f"{name}_seconds"] = time.perf_counter() - t
        out[f"{name}_best_C"] = float(search.best_params_["C"])
    return out


def ridge_wide():
    """RidgeALO's dual search (``p > n``) against the primal one (section 5)."""
    from approxcv.sklearn import _base
    rng = np.random.default_rng(0)
    out = {}
    X = rng.normal(size=(30, 400))
    y = X[:, :5] @ np.ones(5) + rng.normal(size=30)
    alphas = [0.1, 1.0, 10.0]
    dual_secs = warm_times(lambda: RidgeALO(alphas=alphas).fit(X, y))
    dual = RidgeALO(alphas=alphas).fit(X, y)
    use = _base.uses_dual
    _base.uses_dual = lambda *a: False
    try:
        primal, first = timed(lambda: RidgeALO(alphas=alphas).fit(X, y))
        primal_secs = warm_times(lambda: RidgeALO(alphas=alphas).fit(X, y), rounds=3)
    finally:
        _base.uses_dual = use
    grid = lambda e: e.alo_path_[e.alo_path_["stage"] == "grid"]["acv"].to_numpy()  # noqa
    out["30x400"] = {"dual_seconds_min_median": dual_secs, "primal_first_seconds": first,
                     "primal_warm_seconds_min_median": primal_secs,
                     "warm_ratio_primal_over_dual": primal_secs[0] / dual_secs[0],
                     "dual_alpha_": dual.alpha_, "primal_alpha_": primal.alpha_,
                     "max_rel_diff_grid_acv": float(np.max(np.abs(grid(dual) / grid(primal)
                                                                  - 1)))}
    X = rng.normal(size=(30, 2000))
    y = X[:, :5] @ np.ones(5) + rng.normal(size=30)
    out["30x2000"] = {"dual_seconds_min_median":
                      warm_times(lambda: RidgeALO(alphas=alphas).fit(X, y)),
                      "primal": "not run: no answer in 20 minutes (issue 55)"}
    return out


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--lrcv-n", type=int, default=569)
    parser.add_argument("--bbai-only", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--only", choices=["ridge_wide"])
    args = parser.parse_args()
    if args.bbai_only:
        print(json.dumps(bbai_fits()))
        return
    if args.only == "ridge_wide":
        result = json.loads(OUT.read_text()) if OUT.exists() else {}
        result["ridge_wide"] = ridge_wide()
        OUT.write_text(json.dumps(result, indent=2, default=float) + "\n")
        print(json.dumps(result["ridge_wide"], indent=2, default=float))
        return
    result = {"alo_search_over_C": search_over_c(),
              "breast_cancer_logistic": breast_cancer(args.lrcv_n),
              "ridge_vs_ridgecv": ridge_vs_ridgecv(),
              "alo_score_vs_exact_loo": alo_vs_exact(), "ridge_wide": ridge_wide()}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(result, indent=2, default=float) + "\n")
    print(json.dumps(result, indent=2, default=float))


if __name__ == "__main__":
    main()
