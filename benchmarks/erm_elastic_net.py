"""Elastic net: ALOOCV with the support rule, tuned by Algorithms 1 and 2, and its timing.

Part 1 — a sparse regression (n = 200, p = 50, 8 non-zero coefficients). Starting from
(lam1, lam2) = (20, 5), Algorithms 1 (full gradient) and 2 (mini-batches of 20 LOO terms)
descend ALOOCV in log lam. At every 5th iterate we record ALOOCV (support rule: Newton step
on the support of the full fit, L1 term dropped from the Hessian, sign(theta) as its
gradient), exact LOO (``cross_validate(method="exact")``: every fold refitted by the
model's FISTA + exact polish, warm-started, ``vmap`` over folds), the test loss, the support
size and the number of folds whose support would change (flagged by ALOOCV).

Part 2 — wall time of exact LOO vs ALOOCV (``cross_validate`` with ``"exact"`` / ``"ns"``)
as ``n`` grows (p = 50, fixed lam), in one run, excluding the shared full fit and
compilation.

    python benchmarks/erm_elastic_net.py [--quick]

Writes ``benchmarks/results/erm_elastic_net[_quick].json`` and ``.png``.
"""
from __future__ import annotations

import time
import warnings

import numpy as np

import approxcv as acv
from approxcv.models.erm.elastic_net import ElasticNet, SupportChangeWarning
from approxcv.selection import tune_regularization
from _common import figure, run, save_figure, write_results


def loo(model, data, method, params):
    """Leave-one-out :class:`~approxcv.results.CVResult` (support warnings silenced: the
    flags are in ``diagnostics["support_change"]``)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SupportChangeWarning)
        return acv.cross_validate(model, data, acv.folds.leave_one_out(len(data[1])), method,
                                  params=params, progress=False, exact_batch_size=64)


def simulate(n, p=50, nonzero=8, seed=0):
    """``y = X beta + N(0, 1)``; ``beta`` (fixed across calls) has ``nonzero`` entries."""
    beta_rng = np.random.default_rng(12345)
    beta = np.zeros(p)
    beta[:nonzero] = beta_rng.choice([-1.0, 1.0], nonzero) * beta_rng.uniform(0.5, 2.0, nonzero)
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, p))
    return X, X @ beta + rng.normal(size=n)


def evaluate(lam, train, test):
    """ALOOCV, exact LOO, support size, flagged folds and test loss at ``lam``."""
    model = ElasticNet(*lam)
    params = model.fit(train)
    approx, exact = loo(model, train, "ns", params), loo(model, train, "exact", params)
    pred = test[0] @ params.coef + params.intercept
    a, e = float(approx.fold_loss.mean()), float(exact.fold_loss.mean())
    return {"aloocv": a, "exact_loo": e, "rel_diff": abs(a / e - 1),
            "support_size": int(np.sum(params.coef != 0)),
            "folds_support_change": int(approx.diagnostics["support_change"].sum()),
            "exact_folds_support_change": int(exact.diagnostics["support_change"].sum()),
            "exact_converged": bool(exact.diagnostics["exact_converged"].all()),
            "test_loss": float(np.mean(0.5 * (test[1] - pred) ** 2))}


def tuning_runs(train, test, iters, every):
    runs = {}
    for algorithm in ("full", "stochastic"):
        t = time.perf_counter()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", SupportChangeWarning)
            res = tune_regularization(ElasticNet(20.0, 5.0), train, [20.0, 5.0],
                                      algorithm=algorithm, max_iter=iters, learning_rate=0.1,
                                      minibatch_size=20, eval_every=every, seed=0)
        seconds = time.perf_counter() - t
        rows = []
        for k in range(0, len(res.path), every):
            row = res.path.iloc[k]
            rows.append({"iteration": int(row["iteration"]), "lam1": float(row["lam_0"]),
                         "lam2": float(row["lam_1"]), "acv_step": float(row["acv"]),
                         **evaluate((row["lam_0"], row["lam_1"]), train, test)})
        runs[algorithm] = {"seconds": seconds, "best_lam": res.best_lam.tolist(),
                           "best_acv": res.best_acv,
                           "support_change_warned": any(issubclass(w.category,
                                                                   SupportChangeWarning)
                                                        for w in caught),
                           "path": rows}
    return runs


def timing(sizes, lam=(20.0, 5.0)):
    out = []
    for n in sizes:
        train = simulate(n, seed=1)
        model = ElasticNet(*lam)
        params = model.fit(train)
        data = model.prepare(train)[0]
        loo(model, data, "ns", params)
        loo(model, data, "exact", params)            # compile both
        t = time.perf_counter()
        approx = loo(model, data, "ns", params)
        t_aloo = time.perf_counter() - t
        t = time.perf_counter()
        exact = loo(model, data, "exact", params)
        t_exact = time.perf_counter() - t
        a, e = float(approx.fold_loss.mean()), float(exact.fold_loss.mean())
        out.append({"n": n, "aloocv_seconds": t_aloo, "exact_loo_seconds": t_exact,
                    "speedup": t_exact / t_aloo, "aloocv": a, "exact_loo": e,
                    "rel_diff": abs(a / e - 1),
                    "folds_support_change": int(approx.diagnostics["support_change"].sum()),
                    "exact_converged": bool(exact.diagnostics["exact_converged"].all())})
    return out


def main(quick: bool = False):
    train, test = simulate(200), simulate(5000, seed=99)
    iters, every = (10, 5) if quick else (60, 5)
    out = {"quick": quick,
           "setting": {"n": 200, "p": 50, "nonzero": 8, "lam0": [20.0, 5.0],
                       "iterations": iters, "optimizer": "optax.adam(0.1) on log lam",
                       "gradient": "implicit (exact derivative of ALOOCV on the support)",
                       "exact_loo_method": "cross_validate(method='exact'): the model's "
                                           "FISTA + exact polish, warm-started, vmap over "
                                           "folds"},
           "tuning": tuning_runs(train, test, iters, every),
           "timing": timing([100, 200] if quick else [100, 200, 400, 800, 1600])}
    write_results("erm_elastic_net", quick, out, plot)
    for name, path_run in out["tuning"].items():
        print(name, {k: v for k, v in path_run.items() if k != "path"})
        for row in path_run["path"]:
            print("  ", row)
    for row in out["timing"]:
        print(row)
    return out


def plot(out, path):
    fig, axes = figure(1, 2, figsize=(10, 3.8))
    for name, path_run in out["tuning"].items():
        it = [r["iteration"] for r in path_run["path"]]
        label = "Alg. 1" if name == "full" else "Alg. 2"
        axes[0].plot(it, [r["aloocv"] for r in path_run["path"]], marker="o", ms=3,
                     label=f"ALOOCV ({label})")
        axes[0].plot(it, [r["exact_loo"] for r in path_run["path"]], "--",
                     label=f"exact LOO ({label})")
        axes[0].plot(it, [r["test_loss"] for r in path_run["path"]], ":", label=f"test ({label})")
    axes[0].set_xlabel("iteration")
    axes[0].set_ylabel("1/2 squared error")
    axes[0].legend(fontsize=7)
    ns = [r["n"] for r in out["timing"]]
    axes[1].loglog(ns, [r["exact_loo_seconds"] for r in out["timing"]], marker="o",
                   label="exact LOO (FISTA, vmap)")
    axes[1].loglog(ns, [r["aloocv_seconds"] for r in out["timing"]], marker="o", label="ALOOCV")
    axes[1].set_xlabel("n")
    axes[1].set_ylabel("seconds")
    axes[1].legend(fontsize=7)
    save_figure(fig, path, "Elastic net (p=50): tuning (lam1, lam2) by ALOOCV, and timing")


if __name__ == "__main__":
    run(main, __doc__)
