"""Leave-one-out CV of L2 logistic regression on real data: IJ vs NS (ALOOCV) vs exact.

Data: scikit-learn's breast cancer set (569 samples, 30 features standardised to mean 0,
variance 1; y = 1 for benign). For lam on a half-decade grid 10^-2 .. 10^2 (quick: 0.1, 1,
10), ``Logistic(lam)`` (same minimiser as ``LogisticRegression(C=1/lam)``) is cross-validated
leave-one-out by ``approxcv.cross_validate`` with ``method="ij"``, ``"ns"`` and ``"exact"``;
the table gives the mean log-loss of each and the relative errors of IJ and NS against exact.
Exact refits are checked against scikit-learn (``solver="newton-cholesky"``, tol 1e-15) on
a spread of folds (all of them in the full run).

For leave-one-out the two approximations differ by one factor per sample: the NS step is the
IJ step divided by ``1 - d_i h_i`` (``d_i = phi''_i``, ``h_i = a_i^T H^{-1} a_i``), so the IJ
under-corrects by the curvature-weighted leverage ``d_i h_i``; its mean and maximum are
recorded per lam, with the in-sample accuracy (near-separability).

    python benchmarks/erm_logistic_loo.py [--quick]

Writes ``benchmarks/results/erm_logistic_loo[_quick].json``.
"""
from __future__ import annotations

import time
import warnings

import jax.numpy as jnp
import numpy as np
import pandas as pd

import approxcv as acv
from approxcv.engine import aloo
from approxcv.models import Logistic
from approxcv.problem import make_problem
from _common import run, write_json


def load():
    """Breast cancer ``(X standardised (569, 30), y (569,))``."""
    from sklearn.datasets import load_breast_cancer
    X, y = load_breast_cancer(return_X_y=True)
    return (X - X.mean(0)) / X.std(0), y.astype(float)


def sklearn_loo(X, y, lam, folds):
    """Exact LOO log-loss of the samples ``folds`` by scikit-learn refits (``C = 1 / lam``)."""
    from sklearn.linear_model import LogisticRegression
    out = []
    for i in folds:
        keep = np.arange(len(y)) != i
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fit = LogisticRegression(C=1.0 / lam, tol=1e-15, max_iter=1000,
                                     solver="newton-cholesky").fit(X[keep], y[keep])
        eta = fit.decision_function(X[i:i + 1])[0]
        out.append(float(np.logaddexp(0.0, (1.0 - 2.0 * y[i]) * eta)))
    return np.array(out)


def self_influence(model, data, params):
    """``d_i h_i`` ``(n,)``: curvature-weighted leverage of every sample at the fit."""
    problem = make_problem(model, data, params)
    terms = aloo.glm_terms(problem.glm.loss, problem.glm.design, problem.glm.y,
                           problem.u_full)
    hess = aloo.glm_hessian(terms, jnp.diag(jnp.r_[jnp.full(data[0].shape[1], model.lam),
                                                   0.0]))
    return np.asarray(terms.curv * aloo.leverages(jnp.linalg.cholesky(hess), terms))


def one_lam(X, y, lam, n_check):
    model = Logistic(float(lam))
    params = model.fit((X, y))
    n = len(y)
    loo = acv.folds.leave_one_out(n)
    res, seconds = {}, {}
    for method in ("ij", "ns", "exact"):
        t = time.perf_counter()
        res[method] = acv.cross_validate(model, (X, y), loo, method, params=params,
                                         progress=False)
        seconds[method] = time.perf_counter() - t
    exact = res["exact"].fold_loss
    check = np.unique(np.linspace(0, n - 1, n_check).round().astype(int))
    worst = np.argsort(-exact)[:5]
    check = np.union1d(check, worst)
    sk = sklearn_loo(X, y, lam, check)
    dh = self_influence(model, (X, y), params)
    eta = model.predict_linear(params, X)
    row = {"lam": float(lam), "in_sample": float(np.mean(model.loss(eta, y))),
           "in_sample_accuracy": float(np.mean((np.asarray(eta) > 0) == (y > 0))),
           "exact_loo": float(exact.mean()),
           "ns_loo": float(res["ns"].fold_loss.mean()),
           "ij_loo": float(res["ij"].fold_loss.mean()),
           "ns_rel_err": float(res["ns"].fold_loss.mean() / exact.mean() - 1),
           "ij_rel_err": float(res["ij"].fold_loss.mean() / exact.mean() - 1),
           "ns_max_point_rel_err": float(np.max(np.abs(res["ns"].fold_loss / exact - 1))),
           "ij_max_point_rel_err": float(np.max(np.abs(res["ij"].fold_loss / exact - 1))),
           "mean_self_influence": float(dh.mean()), "max_self_influence": float(dh.max()),
           "exact_max_grad_norm": float(res["exact"].diagnostics["exact_grad_norm"].max()),
           "exact_converged": bool(res["exact"].diagnostics["exact_converged"].all()),
           "unreliable_folds": {m: int(len(r.diagnostics["unreliable_folds"]))
                                for m, r in res.items()},
           "sklearn_checked_folds": int(len(check)),
           "sklearn_max_rel_diff": float(np.max(np.abs(exact[check] / sk - 1))),
           "seconds": seconds, "full_fit_grad_norm": model.fit_result_["grad_norm"]}
    return row


def main(quick: bool = False):
    X, y = load()
    lams = np.array([0.1, 1.0, 10.0]) if quick else np.logspace(-2, 2, 9)
    n_check = 8 if quick else len(y)
    rows = [one_lam(X, y, lam, n_check) for lam in lams]
    out = {"quick": quick,
           "data": "sklearn load_breast_cancer: 569 samples, 30 features standardised "
                   "(z-scores over all samples), y = 1 benign",
           "model": "Logistic(lam): sum_i logloss_i + lam/2 ||theta||^2, intercept "
                    "unpenalised (= LogisticRegression(C=1/lam))",
           "methods": "approxcv.cross_validate, leave-one-out, method ij / ns / exact; "
                      "rel_err = mean LOO / exact mean LOO - 1",
           "sklearn_check": "exact LOO losses vs LogisticRegression(C=1/lam, "
                            "solver='newton-cholesky', tol=1e-15) refits",
           "self_influence": "d_i h_i = phi''_i a_i^T H^{-1} a_i; for LOO the NS step is the "
                             "IJ step divided by 1 - d_i h_i",
           "table": rows}
    stem = write_json("erm_logistic_loo", quick, out)
    cols = ["lam", "in_sample_accuracy", "exact_loo", "ns_loo", "ij_loo", "ns_rel_err",
            "ij_rel_err", "mean_self_influence", "max_self_influence", "sklearn_max_rel_diff"]
    with pd.option_context("display.width", 200, "display.max_columns", 20):
        print(pd.DataFrame(rows)[cols])
    print("wrote", stem + ".json")
    return out


if __name__ == "__main__":
    run(main, __doc__)
