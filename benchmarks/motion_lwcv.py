"""Leave-future-out and contiguous within-sequence CV on one long motion sequence (issue 3, item 6).

Seed Figures 7-8: approximate (IJ) vs exact held-out losses of a few folds, for Gaussian,
AR(1) and neural AR(1) emissions (K = 4 states each).

The long sequence: the first ``n_per_class`` training sequences (default 2) of every
activity of the ``motion_lscv`` split, interleaved by class (Standing, Running, Walking,
Badminton, Standing, ...) and concatenated — a 6-channel series of ``400 n_per_class``
steps with an activity switch every 100 steps; channels standardised. Folds:
leave-future-out with starts at 80, 85 and 90 % of the series, and three contiguous
blocks of 5 % each; both with weighting scheme A (for a chain, A and B coincide on
leave-future-out folds). With AR emissions a left-out x_t still serves as the regressor of
x_{t+1} (the convention of GaussianHMM/ARHMM).

    python benchmarks/motion_lwcv.py            # full: results/motion_lwcv.{json,png}
    python benchmarks/motion_lwcv.py --quick    # results/motion_lwcv_quick.json
"""
from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

import numpy as np

import approxcv as acv

sys.path.insert(0, str(Path(__file__).resolve().parent))
from motion_lscv import split  # noqa: E402

OUT = Path(__file__).resolve().parent / "results"
K = 4


def long_sequence(n_per_class):
    """Concatenate ``n_per_class`` training sequences per activity, interleaved by class."""
    data = acv.datasets.load_basic_motions()
    train_idx, _ = split(data.labels, 4, seed=0)
    per_class = [train_idx[data.labels[train_idx] == c][:n_per_class] for c in range(4)]
    order = [int(per_class[c][j]) for j in range(n_per_class) for c in range(4)]
    x = np.concatenate([data.sequences[i] for i in order])
    return (x - x.mean(0)) / x.std(0), order


def run(model, params, x, folds, label):
    out = {}
    for method in ("ij", "exact"):
        res = acv.cross_validate(model, x, folds, method=method, params=params,
                                 scheme="A", progress=False, warn=False, exact_batch_size=3)
        sizes = np.array([len(f) for f in res.folds])
        out[method] = {"fold_loss": res.fold_loss.tolist(),
                       "fold_loss_per_step": (res.fold_loss / sizes).tolist(),
                       "seconds": res.seconds, "stage_seconds": res.stage_seconds}
        if method == "exact":
            out[method]["converged"] = np.asarray(res.diagnostics["exact_converged"]).tolist()
    ij, ex = np.array(out["ij"]["fold_loss"]), np.array(out["exact"]["fold_loss"])
    out["rel_error"] = (np.abs(ij - ex) / np.abs(ex)).tolist()
    out["fold_sizes"] = [len(f) for f in folds]
    out["fold_starts"] = [int(np.min(f)) for f in folds]
    print(f"  {label:>12}: IJ {np.round(ij, 1)} exact {np.round(ex, 1)} "
          f"({out['ij']['seconds']:.1f}s vs {out['exact']['seconds']:.1f}s)", flush=True)
    return out


def plot(rows, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    fig, ax = plt.subplots(1, 2, figsize=(10, 4.5))
    for j, kind in enumerate(("leave_future_out", "contiguous")):
        lo, hi = np.inf, -np.inf
        for r in rows:
            ij = np.array(r[kind]["ij"]["fold_loss_per_step"])
            ex = np.array(r[kind]["exact"]["fold_loss_per_step"])
            ax[j].plot(ex, ij, "o", label=r["model"])
            lo, hi = min(lo, ex.min(), ij.min()), max(hi, ex.max(), ij.max())
        ax[j].plot([lo, hi], [lo, hi], "k:", lw=1)
        ax[j].set_xlabel("exact CV loss per left-out step")
        ax[j].set_ylabel("IJ loss per left-out step")
        ax[j].set_title(kind.replace("_", " "))
        ax[j].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--n-per-class", type=int, default=None)
    parser.add_argument("--hidden", type=int, default=8)
    args = parser.parse_args(argv)
    n_per_class = args.n_per_class or (1 if args.quick else 2)
    x, order = long_sequence(n_per_class)
    T = len(x)
    starts = [int(T * f) for f in (0.8, 0.85, 0.9)]
    folds = {"leave_future_out": acv.folds.leave_future_out(T, starts),
             "contiguous": acv.folds.contiguous(T, 0.05, 3, seed=0)}
    models = [("Gaussian", acv.models.GaussianHMM(K, n_init=1)),
              ("AR(1)", acv.models.ARHMM(K, order=1, n_init=1)),
              (f"NN-AR(1), H={args.hidden}",
               acv.models.NeuralARHMM(K, order=1, hidden=args.hidden, n_init=1))]
    rows, t0 = [], time.perf_counter()
    for name, model in models:
        t = time.perf_counter()
        params = model.fit(x)
        row = {"model": name, "repr": repr(model), "fit_seconds": time.perf_counter() - t}
        print(f"{name} (fit {row['fit_seconds']:.0f}s)", flush=True)
        for kind, f in folds.items():
            row[kind] = run(model, params, x, f, kind)
        rows.append(row)
        OUT.mkdir(exist_ok=True)
        (OUT / ("motion_lwcv_quick" if args.quick else "motion_lwcv")).with_suffix(
            ".partial.json").write_text(json.dumps(rows, indent=1))
    result = {"description": __doc__.split("\n\n")[0],
              "sequence": f"{n_per_class} training sequences per activity of the motion_lscv "
                          f"split, interleaved by class and concatenated (T={T}); sequence "
                          f"indices {order}",
              "T": T, "K": K, "scheme": "A", "quick": args.quick,
              "loss_unit": "-log p(x_o | x_kept) per fold (standardised units)",
              "total_seconds": time.perf_counter() - t0, "platform": platform.platform(),
              "rows": rows}
    OUT.mkdir(exist_ok=True)
    stem = "motion_lwcv_quick" if args.quick else "motion_lwcv"
    (OUT / f"{stem}.json").write_text(json.dumps(result, indent=1))
    (OUT / f"{stem}.partial.json").unlink(missing_ok=True)
    plot(rows, OUT / f"{stem}.png")
    print(f"wrote {OUT / stem}.json/.png in {result['total_seconds']:.0f}s")


if __name__ == "__main__":
    main()
