"""Leave-one-sequence-out CV at D ~ 12,000: matrix-free IJ vs exact L-BFGS refits.

``--model wide`` (default): a GaussianHMM with K = 4 states and R channels (diagonal
covariances, D = 8 R + 15; R = 1,500 by default, D = 12,015; ``--channels``) on 64 simulated
sequences of 60-100 steps (a regime-switching signal plus noise, seed 0). Whether the fit
converged is recorded (gradient norm, CG curvature bound).

``--model neural``: a NeuralARHMM (K = 4 states, lag order p = 5, H = 80 hidden tanh units per state, full
covariances: D = 11,963 parameters) on the 64 training sequences of BasicMotions
(standardised with their own statistics). ``cross_validate`` picks the matrix-free path
(Hessian-vector products + conjugate gradients) automatically because D > MAX_DENSE_DIM:
no D x D Hessian (1.1 GB) and no D x 64 Jacobian is formed. Exact LOO refits every fold
with L-BFGS warm-started at the fit; it is run on a few folds and its per-fold time is
extrapolated to all 64 folds (labelled as such in the JSON).

The fit is deliberately limited (``--fit-steps`` L-BFGS steps): the point is the IJ at an
approximate fit of a large non-convex model, whose quality the diagnostics report
(gradient norm, Newton-step norm by CG, CG steps and curvature).

Memory: peak resident set size of the process after each stage (``ru_maxrss``).
"""
from __future__ import annotations

import argparse
import resource
import time
import warnings

import numpy as np

import approxcv as acv
from _common import figure, save_figure, write_json, write_results


def peak_rss_gb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6


def training_sequences(n: int):
    bm = acv.datasets.load_basic_motions()
    rng = np.random.default_rng(0)
    seqs = [bm.sequences[i] for i in rng.permutation(len(bm.sequences))[:n]]
    flat = np.concatenate(seqs)
    return [(s - flat.mean(0)) / flat.std(0) for s in seqs]


def wide_sequences(n: int, channels: int):
    """``n`` sequences of 60-100 steps: +-1 regimes switching every 20 steps, unit noise."""
    rng = np.random.default_rng(0)
    seqs = []
    for _ in range(n):
        steps = int(rng.integers(60, 101))
        regime = np.where((np.arange(steps) // 20) % 2 == 1, 1.0, -1.0)
        seqs.append(regime[:, None] + rng.normal(size=(steps, channels)))
    return seqs


def main(quick: bool, fit_steps: int, n_exact: int, which: str = "wide",
         channels: int | None = None, exact_solver: str | None = None,
         cg_rtol: float | None = None, compare_rtol: float | None = None):
    stem = f"lscv_scale_{which}" + (f"_R{channels}" if channels else "")
    n_seq = 16 if quick else 64
    if which == "wide":
        seqs = wide_sequences(n_seq, channels or (100 if quick else 1500))
        model = acv.models.GaussianHMM(4, n_init=1, max_steps=fit_steps)
    else:
        seqs = training_sequences(n_seq)
        model = acv.models.NeuralARHMM(4, order=5, hidden=8 if quick else 80, n_init=1,
                                       max_steps=fit_steps)
    out = {"model": repr(model), "n_sequences": n_seq, "fit_steps": fit_steps}
    t = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        params = model.fit(seqs)
    out["fit_seconds"] = time.perf_counter() - t
    out["fit_warnings"] = sorted({str(w.message)[:120] for w in caught})
    out["fit_grad_norm"] = float(np.min(model.fit_result_["grad_norm"]))
    out["rss_after_fit_gb"] = peak_rss_gb()
    print(f"fit {out['fit_seconds']:.0f}s, grad norm {out['fit_grad_norm']:.3g}", flush=True)
    # results so far (``stage`` says how far the run got): a run cut off later keeps them
    write_json(stem, quick, {**out, "stage": "fit"})

    folds = acv.folds.leave_one_out(n_seq)
    kw = dict(params=params, level="structure", progress=False)
    cg = dict(solver="cg", cg_max_steps=3000)
    if cg_rtol is not None:
        cg["cg_rtol"] = cg_rtol
    t = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ij = acv.cross_validate(model, seqs, folds, "ij", **cg, **kw)
    out["ij_seconds"] = time.perf_counter() - t
    out["ij_warnings"] = sorted({str(w.message)[:160] for w in caught})
    d = ij.diagnostics
    out.update({"num_params": d["num_params"], "solver": d["solver"],
                "cg_variant": "block CG over all folds + the full-data Newton system",
                "grad_norm": d["grad_norm"], "newton_step_norm": d["newton_step_norm"],
                "hessian_min_curvature_bound": d["hessian_min_eig"],
                "cg_steps_max": int(np.max(d["cg_num_steps"])),
                "cg_steps_median": float(np.median(d["cg_num_steps"])),
                "cg_all_converged": bool(np.all(d["cg_converged"])),
                "cg_rtol": d["cg_rtol"],
                # the last system is the full-data Newton step, solved to its own tolerance
                "cg_newton_rtol": d.get("cg_newton_rtol"),
                "cg_newton_steps": int(d["cg_num_steps"][-1]),
                "cg_max_residual_folds": float(np.max(d["cg_residual"][:-1])),
                "cg_max_residual": float(np.max(d["cg_residual"])),
                "ij_stage_seconds": ij.stage_seconds, "rss_after_ij_gb": peak_rss_gb(),
                "dense_hessian_would_need_gb": d["num_params"] ** 2 * 8 / 1e9,
                "ij_fold_loss": ij.fold_loss.tolist()})

    print({k: v for k, v in out.items() if not isinstance(v, list)}, flush=True)
    if compare_rtol is not None:
        # the CG tolerance's share of the IJ error: the same IJ solved to ``compare_rtol``
        # (not part of any timing ratio)
        t = time.perf_counter()
        tight = acv.cross_validate(model, seqs, folds, "ij", **{**cg, "cg_rtol": compare_rtol},
                                   **kw)
        diff = np.abs(tight.fold_loss - ij.fold_loss)
        out.update({"compare_rtol": compare_rtol,
                    "compare_seconds": time.perf_counter() - t,
                    "compare_cg_steps_max": int(np.max(tight.diagnostics["cg_num_steps"])),
                    "compare_max_abs_fold_loss_diff": float(np.max(diff)),
                    "compare_max_rel_fold_loss_diff":
                        float(np.max(diff / np.abs(tight.fold_loss)))})
        print({k: v for k, v in out.items() if k.startswith("compare")}, flush=True)
    write_json(stem, quick, {**out, "stage": "ij"})
    sub = folds[:n_exact]
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exact = acv.cross_validate(model, seqs, sub, "exact", exact_batch_size=1,
                                   exact_solver=exact_solver, **kw)
    exact_seconds = time.perf_counter() - t
    per_fold = exact_seconds / n_exact
    cmp = acv.accuracy(ij, exact)
    out.update({"exact_solver": exact.diagnostics["exact_solver"],
                "exact_folds_run": n_exact, "exact_seconds_measured": exact_seconds,
                "exact_seconds_per_fold": per_fold,
                "exact_seconds_all_folds_extrapolated": per_fold * n_seq,
                "exact_converged": exact.diagnostics["exact_converged"].tolist(),
                "exact_num_steps": np.asarray(exact.diagnostics.get("exact_num_steps",
                                                                    [])).tolist(),
                "exact_fold_loss": exact.fold_loss.tolist(),
                "ij_fold_loss_same_folds": ij.fold_loss[:n_exact].tolist(),
                "rel_error_fold": cmp.attrs["mean_rel_error_fold"],
                "speedup_exact_over_ij_extrapolated": per_fold * n_seq / out["ij_seconds"],
                "rss_after_exact_gb": peak_rss_gb()})
    out["target_ij_20x_faster"] = out["speedup_exact_over_ij_extrapolated"] >= 20
    out["stage"] = "complete"
    print({k: v for k, v in out.items() if not isinstance(v, list)})
    write_results(stem, quick, out, plot)
    return out


def plot(out, path):
    fig, ax = figure(1, 2, figsize=(9, 3.5))
    e, a = np.array(out["exact_fold_loss"]), np.array(out["ij_fold_loss_same_folds"])
    ax[0].scatter(e, a)
    lo, hi = min(e.min(), a.min()), max(e.max(), a.max())
    ax[0].plot([lo, hi], [lo, hi], "k--", lw=0.8)
    ax[0].set_xlabel("exact LOO loss (per left-out sequence)")
    ax[0].set_ylabel("IJ (matrix-free)")
    ax[1].bar([f"IJ, {out['n_sequences']} folds",
               f"exact, {out['n_sequences']} folds\n(extrapolated)"],
              [out["ij_seconds"], out["exact_seconds_all_folds_extrapolated"]])
    ax[1].set_yscale("log")
    ax[1].set_ylabel("seconds")
    save_figure(fig, path, f"LSCV at D = {out['num_params']:,}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fast smoke run")
    parser.add_argument("--fit-steps", type=int, default=1000)
    parser.add_argument("--n-exact", type=int, default=2)
    parser.add_argument("--model", choices=("wide", "neural"), default="wide")
    parser.add_argument("--channels", type=int, default=None,
                        help="wide model: channels R (D = 8 R + 15; default 1500, quick 100)")
    parser.add_argument("--exact-solver", choices=("bfgs", "lbfgs", "newton"), default=None,
                        help="exact refits (default: the engine's choice by D)")
    parser.add_argument("--cg-rtol", type=float, default=None,
                        help="CG relative residual tolerance (default: cross_validate's)")
    parser.add_argument("--compare-rtol", type=float, default=None,
                        help="also solve the IJ to this tolerance and record how much the "
                             "fold losses move (untimed)")
    args = parser.parse_args()
    main(args.quick, args.fit_steps, args.n_exact, args.model, args.channels, args.exact_solver,
         args.cg_rtol, args.compare_rtol)
