"""Leave-one-sequence-out ACV vs exact CV for AR-HMM orders on BasicMotions (issue 3, item 5).

Seed Figure 6 layout: for AR orders p = 0..5 and a neural AR(1) HMM, the leave-one-sequence-
out IJ estimate (all 64 training sequences), exact LOSO (refits on a subset of folds,
timings extrapolated to 64 and labelled so), and the test loss of the full-data fit on the
16 held-out sequences, each with jackknife standard errors; plus times and the IJ/exact speedup.

Protocol: the 80 BasicMotions sequences are split 80/20 stratified by activity with a fixed
seed (16 train / 4 test per class), channels standardised with training statistics,
K = 4 states for every model. Losses are negative log-likelihoods per sequence
(100 steps x 6 channels), in standardised units.

Timings are measured in this one run with the public ``acv.cross_validate`` API (they pick
up any faster engine path automatically). Both are single cold calls (JIT compilation
included): the IJ time is that of one call over all 64 folds; the exact time per fold is
the refit + held-out time of one call on a subset of folds (refitted together in one
``vmap``, or one at a time for D > 300) divided by the subset size, multiplied by 64. Every model is fitted from one
start (``n_init=1``; on this data two starts reached the same optimum for AR(1)).

    python benchmarks/motion_lscv.py            # full: results/motion_lscv.{json,png}
    python benchmarks/motion_lscv.py --quick    # small smoke run: results/motion_lscv_quick.json
"""
from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import numpy as np

import approxcv as acv

OUT = Path(__file__).resolve().parent / "results"
K = 4


def split(labels, n_test_per_class, seed=0):
    """Stratified split: ``(train_idx, test_idx)`` with ``n_test_per_class`` test items per class."""
    rng = np.random.default_rng(seed)
    test = np.concatenate([rng.permutation(np.flatnonzero(labels == c))[:n_test_per_class]
                           for c in np.unique(labels)])
    train = np.setdiff1d(np.arange(len(labels)), test)
    return train, np.sort(test)


def jackknife_se(losses):
    """Jackknife standard error of the mean of per-sequence losses (= sd / sqrt(n))."""
    losses = np.asarray(losses, float)
    n = len(losses)
    loo_means = (losses.sum() - losses) / (n - 1)
    return float(np.sqrt((n - 1) / n * np.sum((loo_means - loo_means.mean()) ** 2)))


def num_params(model, train, params):
    return int(acv.make_problem(model, train, params, level="structure").u_full.size)


def run_model(name, model, train, test, exact_folds, with_ns):
    row = {"model": name, "repr": repr(model)}
    t = time.perf_counter()
    params = model.fit(train)
    row["fit_seconds"] = time.perf_counter() - t
    row["fit_converged"] = bool(model.fit_result_["converged"][model.fit_result_["best"]])
    row["D"] = num_params(model, train, params)
    n = len(train)
    loo = acv.folds.leave_one_out(n)
    ij = acv.cross_validate(model, train, loo, method="ij", params=params, level="structure",
                            progress=False, warn=False)
    row["ij"] = {"fold_loss": ij.fold_loss.tolist(), "mean": float(ij.fold_loss.mean()),
                 "se": jackknife_se(ij.fold_loss), "seconds": ij.seconds,
                 "stage_seconds": ij.stage_seconds,
                 "hessian_min_eig": float(ij.diagnostics.get("hessian_min_eig", np.nan)),
                 "jitter": float(ij.diagnostics.get("jitter", 0.0))}
    if with_ns:
        ns = acv.cross_validate(model, train, loo, method="ns", params=params,
                                level="structure", progress=False, warn=False)
        row["ns"] = {"fold_loss": ns.fold_loss.tolist(), "mean": float(ns.fold_loss.mean()),
                     "se": jackknife_se(ns.fold_loss), "seconds": ns.seconds}
    # exact: one call, the subset's refits batched in one vmap (one at a time for D > 300,
    # to bound the memory of the Newton polish); cold: JIT compilation included, as for
    # the IJ; time per fold extrapolated to all n folds
    sub = acv.folds.Folds([loo[i] for i in exact_folds], n)
    ex = acv.cross_validate(model, train, sub, method="exact", params=params,
                            level="structure", progress=False, warn=False,
                            exact_batch_size=len(sub) if row["D"] <= 300 else 1)
    per_fold = (ex.stage_seconds["refit"] + ex.stage_seconds["heldout"]) / len(sub)
    exact_loss, converged = ex.fold_loss, np.asarray(ex.diagnostics["exact_converged"])
    ij_sub = ij.fold_loss[list(exact_folds)]
    row["exact"] = {"folds": [int(i) for i in exact_folds], "fold_loss": exact_loss.tolist(),
                    "mean_on_subset": float(exact_loss.mean()),
                    "se_on_subset": jackknife_se(exact_loss) if len(sub) > 2 else None,
                    "ij_mean_on_subset": float(ij_sub.mean()),
                    "max_abs_ij_error": float(np.max(np.abs(ij_sub - exact_loss))),
                    "mean_abs_ij_error": float(np.mean(np.abs(ij_sub - exact_loss))),
                    "converged": converged.tolist(),
                    "seconds_per_fold": per_fold,
                    "seconds_all_folds_extrapolated": per_fold * n,
                    "extrapolated": len(sub) < n}
    prepared = model.prepare(test)[0]
    test_loss = -np.asarray(model.sequence_log_likelihoods(params, prepared))
    row["test"] = {"loss": test_loss.tolist(), "mean": float(test_loss.mean()),
                   "se": jackknife_se(test_loss)}
    row["in_sample_mean"] = float(-np.asarray(model.sequence_log_likelihoods(
        params, model.prepare(train)[0])).mean())
    row["speedup_ij_vs_exact"] = row["exact"]["seconds_all_folds_extrapolated"] / ij.seconds
    return row


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    x = np.arange(len(rows))
    labels = [r["model"] for r in rows]
    fig, ax = plt.subplots(1, 3, figsize=(15, 4.2))
    ax[0].errorbar(x - 0.1, [r["ij"]["mean"] for r in rows], [r["ij"]["se"] for r in rows],
                   fmt="o-", label="ACV (IJ), 64 folds", capsize=3)
    ax[0].errorbar(x + 0.1, [r["test"]["mean"] for r in rows], [r["test"]["se"] for r in rows],
                   fmt="s-", label="test (16 sequences)", capsize=3)
    ax[0].set_ylabel("NLL per sequence (standardised units)")
    ax[0].set_title("Loss vs model (± jackknife SE)")
    ax[1].plot(x, [r["exact"]["mean_on_subset"] for r in rows], "k^", ms=9,
               label="exact CV (fold subset)")
    ax[1].plot(x, [r["exact"]["ij_mean_on_subset"] for r in rows], "o", mfc="none", ms=9,
               label="ACV (IJ), same folds")
    ax[1].set_title(f"Exact vs ACV on {len(rows[0]['exact']['folds'])} folds")
    ax[2].semilogy(x, [r["ij"]["seconds"] for r in rows], "o-", label="IJ, 64 folds")
    ax[2].semilogy(x, [r["exact"]["seconds_all_folds_extrapolated"] for r in rows], "^-",
                   label="exact, 64 folds (extrapolated)")
    ax[2].set_ylabel("seconds")
    ax[2].set_title("Time")
    for a in ax:
        a.set_xticks(x, labels, rotation=30)
        a.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--exact-folds", type=int, default=None,
                        help="folds refitted exactly (default 3 full, 2 quick)")
    parser.add_argument("--hidden", type=int, default=None, help="neural hidden units")
    parser.add_argument("--orders", type=str, default=None,
                        help="comma-separated AR orders (default 0,1,2,3,4,5; quick 0,1)")
    parser.add_argument("--ns", action="store_true", help="also run NS (64 Hessians/model)")
    parser.add_argument("--report-partial", action="store_true",
                        help="write the JSON/PNG from the rows finished so far by a running "
                             "or interrupted full run (marked incomplete)")
    args = parser.parse_args(argv)
    data = acv.datasets.load_basic_motions()
    train_idx, test_idx = split(data.labels, 4, seed=0)
    if args.quick:
        train_idx = np.sort(np.concatenate([train_idx[data.labels[train_idx] == c][:4]
                                            for c in range(4)]))
        test_idx = test_idx[::2]
    x = data.sequences
    flat = np.concatenate([x[i] for i in train_idx])
    mean, sd = flat.mean(0), flat.std(0)
    train = [(x[i] - mean) / sd for i in train_idx]
    test = [(x[i] - mean) / sd for i in test_idx]
    orders = ((0, 1) if args.quick else tuple(range(6))) if args.orders is None else tuple(
        int(p) for p in args.orders.split(","))
    hidden = args.hidden or (4 if args.quick else 8)
    n_exact = args.exact_folds or (2 if args.quick else 3)
    exact_folds = np.sort(np.random.default_rng(2).permutation(len(train))[:n_exact])
    models = [(f"AR({p})", acv.models.ARHMM(K, order=p, n_init=1)) for p in orders]
    models.append((f"NN-AR(1), H={hidden}", acv.models.NeuralARHMM(K, order=1, hidden=hidden, n_init=1)))
    rows = []
    t0 = time.perf_counter()
    stem = "motion_lscv_quick" if args.quick else "motion_lscv"
    OUT.mkdir(exist_ok=True)
    if args.report_partial:
        rows = json.loads((OUT / f"{stem}.partial.json").read_text())
        models = []
    for name, model in models:
        row = run_model(name, model, train, test, exact_folds, args.ns)
        rows.append(row)
        (OUT / f"{stem}.partial.json").write_text(json.dumps(rows, indent=1))
        print(f"{name:>18} D={row['D']:5d} fit {row['fit_seconds']:6.1f}s | "
              f"ACV {row['ij']['mean']:9.2f}±{row['ij']['se']:.2f} "
              f"test {row['test']['mean']:9.2f}±{row['test']['se']:.2f} | exact-vs-IJ on "
              f"{n_exact}: {row['exact']['mean_on_subset']:9.2f} vs "
              f"{row['exact']['ij_mean_on_subset']:9.2f} | IJ {row['ij']['seconds']:.1f}s, "
              f"exact(64, extrap.) {row['exact']['seconds_all_folds_extrapolated']:.0f}s, "
              f"x{row['speedup_ij_vs_exact']:.1f}", flush=True)
    result = {
        "description": __doc__.split("\n\n")[0],
        "data": "BasicMotions (aeon 1.6.0 copy, UEA/UCR archive), standardised with train stats",
        "n_train": len(train), "n_test": len(test), "K": K,
        "split": {"seed": 0, "stratified_by": "activity", "train_idx": train_idx.tolist(),
                  "test_idx": test_idx.tolist()},
        "loss_unit": "negative log-likelihood per sequence (100 steps x 6 channels)",
        "exact_cv": f"exact refits on {n_exact} of {len(train)} folds (fold ids listed per "
                    "model); exact time per fold (one cold call, JIT included) x all folds",
        "ns": "run" if args.ns else "not run (one Hessian per fold; too slow for this study)",
        "reductions": ("exact CV on a fold subset; neural hidden size chosen so the dense "
                       "IJ Hessian fits in memory (the matrix-free engine path is needed for "
                       "D in the thousands)"),
        "timing_note": "IJ time = one cold cross_validate call incl. JIT compilation",
        "quick": args.quick,
        "complete": len(rows) == len(orders) + 1,
        "models_run": [r["model"] for r in rows],
        "total_seconds": None if args.report_partial else time.perf_counter() - t0,
        "platform": platform.platform(), "rows": rows}
    (OUT / f"{stem}.json").write_text(json.dumps(result, indent=1))
    if not args.report_partial:
        (OUT / f"{stem}.partial.json").unlink()
    plot(rows, OUT / f"{stem}.png")
    print(f"wrote {OUT / stem}.json/.png")


if __name__ == "__main__":
    main()
