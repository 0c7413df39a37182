"""L2 logistic regression on scikit-learn's bundled 8x8 digits: ALOOCV vs exact LOO (seed Table 1).

Part 1 — digits 2 vs 3 (pixels / 16), a stratified 75/25 train/test split. For a grid of
lam: in-sample loss, test loss, exact LOOCV, ALOOCV and IF (influence function with a
linearised loss), all mean log-loss; plus the training points with the highest exact
LOO loss. Target: ALOOCV within 1% of exact LOOCV at every lam.

Part 2 — timing at n >= 500: digits even vs odd, ``n`` random training samples. Exact LOO
is measured two ways in the same run: the engine's batched refits
(``approxcv.cross_validate(method="exact")`` = ``approxcv.engine.exact_params``, BFGS +
Newton polish, ``vmap`` over folds) and the faster warm-started damped Newton refits of
``Logistic.refit_batch`` (``vmap`` over folds). Target: ALOOCV >= 50x faster. Timings exclude
the shared full-data fit and compilation (each method runs once before being timed).

    python benchmarks/erm_logistic_digits.py [--quick]

Writes ``benchmarks/results/erm_logistic_digits[_quick].json`` and ``.png``.
"""
from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np
import pandas as pd

import approxcv as acv
from approxcv.models.logistic import Logistic
from approxcv.tuning import aloocv, exact_cv

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def load_binary(positive, negative=None, seed=0):
    """Digits ``(X / 16, y, labels, images)``; ``y = 1`` for labels in ``positive``, 0 for
    ``negative`` (or for every other digit when ``negative`` is None)."""
    from sklearn.datasets import load_digits
    digits = load_digits()
    keep = np.ones(len(digits.target), bool) if negative is None else np.isin(
        digits.target, list(positive) + list(negative))
    X, labels = digits.data[keep] / 16.0, digits.target[keep]
    return X, np.isin(labels, list(positive)).astype(float), labels, digits.images[keep]


def stratified_split(y, test_frac, seed):
    rng = np.random.default_rng(seed)
    test = np.concatenate([rng.choice(np.flatnonzero(y == c),
                                      int(round(test_frac * np.sum(y == c))), replace=False)
                           for c in (0.0, 1.0)])
    train = np.setdiff1d(np.arange(len(y)), test)
    return train, np.sort(test)


def mean_logloss(model, params, X, y):
    return float(np.mean(np.asarray(model.loss(model.predict_linear(params, X), y))))


def table(X, y, X_test, y_test, lams, progress):
    """Seed Table 1 layout for every lam, and the per-point losses at each lam."""
    rows, points = [], {}
    n = len(y)
    for lam in lams:
        model = Logistic(float(lam))
        params = model.fit((X, y))
        exact = acv.cross_validate(model, (X, y), acv.folds.leave_one_out(n), method="exact",
                                   params=params, progress=progress, exact_batch_size=64)
        approx = aloocv(model, (X, y), params)
        infl = aloocv(model, (X, y), params, method="influence")
        rows.append({"lam": float(lam), "in_sample": mean_logloss(model, params, X, y),
                     "test": mean_logloss(model, params, X_test, y_test),
                     "exact_loocv": float(exact.fold_loss.mean()),
                     "aloocv": approx.estimate, "influence": infl.estimate,
                     "exact_converged": bool(np.all(exact.diagnostics["exact_converged"]))})
        rows[-1]["aloocv_rel_err"] = abs(rows[-1]["aloocv"] / rows[-1]["exact_loocv"] - 1)
        rows[-1]["influence_rel_err"] = abs(rows[-1]["influence"] / rows[-1]["exact_loocv"] - 1)
        points[float(lam)] = {"exact": exact.fold_loss, "aloocv": approx.loo_losses(),
                              "influence": infl.loo_losses(),
                              "in_sample": np.asarray(model.loss(model.predict_linear(
                                  params, X), y))}
    return pd.DataFrame(rows), points


def timed(fun, repeats=1):
    fun()                                   # compile / warm up
    best = np.inf
    for _ in range(repeats):
        t = time.perf_counter()
        fun()
        best = min(best, time.perf_counter() - t)
    return best


def timing(n, lam, with_engine, seed=1):
    X, y, _, _ = load_binary(positive=(1, 3, 5, 7, 9))
    idx = np.sort(np.random.default_rng(seed).choice(len(y), n, replace=False))
    X, y = X[idx], y[idx]
    model = Logistic(lam)
    t = time.perf_counter()
    params = model.fit((X, y))
    fit_seconds = time.perf_counter() - t
    data = model.prepare((X, y))[0]
    out = {"n": n, "lam": lam, "full_fit_seconds": fit_seconds}
    out["aloocv_seconds"] = timed(lambda: aloocv(model, data, params), repeats=3)
    aloo_value = aloocv(model, data, params).estimate
    out["exact_newton_seconds"] = timed(lambda: exact_cv(model, data, params))
    newton_value, _, _, converged = exact_cv(model, data, params)
    out.update({"aloocv": aloo_value, "exact_loocv_newton": newton_value,
                "exact_newton_converged": bool(converged.all()),
                "aloocv_rel_err": abs(aloo_value / newton_value - 1),
                "speedup_vs_exact_newton": out["exact_newton_seconds"] / out["aloocv_seconds"]})
    if with_engine:
        folds = acv.folds.leave_one_out(n)

        def engine_exact():
            return acv.cross_validate(model, data, folds, method="exact", params=params,
                                      progress=False, exact_batch_size=64)
        engine_exact_small = acv.cross_validate(model, data, folds.subset(np.arange(64)),
                                                method="exact", params=params, progress=False,
                                                exact_batch_size=64)   # compile on 64 folds
        del engine_exact_small
        t = time.perf_counter()
        res = engine_exact()
        out["exact_engine_seconds"] = time.perf_counter() - t
        out["exact_loocv_engine"] = float(res.fold_loss.mean())
        out["exact_engine_converged"] = bool(np.all(res.diagnostics["exact_converged"]))
        out["speedup_vs_exact_engine"] = out["exact_engine_seconds"] / out["aloocv_seconds"]
    return out


def main(quick: bool = False):
    X_all, y_all, labels, images = load_binary(positive=(3,), negative=(2,))
    train, test = stratified_split(y_all, 0.25, seed=0)
    X, y, X_test, y_test = X_all[train], y_all[train], X_all[test], y_all[test]
    lams = np.array([0.1, 1.0, 10.0]) if quick else np.logspace(-2, 2, 9)
    frame, points = table(X, y, X_test, y_test, lams, progress=False)
    best_lam = float(frame["lam"].iloc[int(np.argmin(frame["aloocv"]))])
    pts = points[best_lam]
    top = np.argsort(-pts["exact"])[:10]
    worst = pd.DataFrame({"train_index": top, "digit": labels[train][top],
                          "exact_loo": pts["exact"][top], "aloocv": pts["aloocv"][top],
                          "influence": pts["influence"][top],
                          "in_sample": pts["in_sample"][top]})
    out = {"quick": quick,
           "part1": {"data": "sklearn load_digits, 2 (y=0) vs 3 (y=1), pixels/16, stratified "
                             "75/25 split (seed 0)",
                     "n_train": int(len(y)), "n_test": int(len(y_test)), "dim": X.shape[1] + 1,
                     "losses": "mean log-loss; influence = IJ with linearised loss (seed Lemma 3)",
                     "exact_loo_method": "approxcv.cross_validate(method='exact') -> "
                                         "engine.exact_params (BFGS + Newton, vmap over folds)",
                     "table": frame.to_dict(orient="records"),
                     "highest_loss_points_lam": best_lam,
                     "highest_loss_points": worst.to_dict(orient="records"),
                     "max_aloocv_rel_err": float(frame["aloocv_rel_err"].max())}}
    out["part1"]["target_aloocv_within_1pct"] = {
        "met_at_every_lam": bool((frame["aloocv_rel_err"] <= 0.01).all()),
        "failing_lams": frame.loc[frame["aloocv_rel_err"] > 0.01, "lam"].tolist()}
    sizes = [500] if quick else [600, 1200]
    out["part2"] = {"data": "sklearn load_digits, odd (y=1) vs even digits, random subset",
                    "runs": [timing(n, 1.0, with_engine=(not quick and n == 600))
                             for n in sizes]}
    speedups = [r.get("speedup_vs_exact_engine", r["speedup_vs_exact_newton"])
                for r in out["part2"]["runs"]]
    out["part2"]["target_50x"] = {
        "min_speedup_vs_exact_newton": float(min(r["speedup_vs_exact_newton"]
                                                 for r in out["part2"]["runs"])),
        "min_speedup_vs_engine_exact": (float(min(speedups)) if not quick else None),
        "met_vs_exact_newton": bool(min(r["speedup_vs_exact_newton"]
                                        for r in out["part2"]["runs"]) >= 50)}
    os.makedirs(RESULTS, exist_ok=True)
    stem = os.path.join(RESULTS, "erm_logistic_digits" + ("_quick" if quick else ""))
    with open(stem + ".json", "w") as f:
        json.dump(out, f, indent=1, default=float)
    plot(frame, images[train][top[:8]], worst, stem + ".png")
    with pd.option_context("display.width", 140, "display.max_columns", 20):
        print(frame)
        print(worst)
        print(pd.DataFrame(out["part2"]["runs"]).T)
    return out


def plot(frame, images, worst, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig = plt.figure(figsize=(11, 4))
    ax = fig.add_subplot(1, 2, 1)
    for col, style in (("in_sample", ":"), ("test", "-."), ("exact_loocv", "-"),
                       ("aloocv", "--"), ("influence", ":")):
        ax.loglog(frame["lam"], frame[col], style, marker="o", ms=3, label=col)
    ax.set_xlabel("lam")
    ax.set_ylabel("mean log-loss")
    ax.legend(fontsize=7)
    ax.set_title("2 vs 3: losses vs lam")
    for k, img in enumerate(images):
        a = fig.add_subplot(2, 8, 8 * (k // 4) + 5 + k % 4)
        a.imshow(img, cmap="gray_r")
        a.set_axis_off()
        row = worst.iloc[k]
        a.set_title(f"{int(row['digit'])}: {row['exact_loo']:.2f}", fontsize=7)
    fig.suptitle("highest exact-LOO-loss training points (digit: loss)", x=0.75, y=0.98,
                 fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fast smoke run")
    main(parser.parse_args().quick)
