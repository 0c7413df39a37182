"""The ``approxcv`` command.

``approxcv demo`` fits a hidden Markov model to the shipped call-volume series (or your own
data), estimates cross-validation on many folds with the infinitesimal jackknife, checks a
few folds by exact refits, and writes a comparison table, a scatter plot and a JSON summary.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

MODELS = ("poisson-hmm", "gaussian-hmm")


def _load_series(path: str | None, n_points: int | None) -> tuple[np.ndarray, str]:
    from . import datasets
    if path is None:
        return datasets.load_calls(n_points), "calls (fpp2, 5-minute call volumes; shipped)"
    p = Path(path)
    if not p.exists():
        raise SystemExit(f"approxcv: --data file {path!r} does not exist")
    if p.suffix == ".npy":
        x = np.load(p)
    else:
        import pandas as pd
        df = pd.read_csv(p)
        col = "calls" if "calls" in df.columns else df.columns[-1]
        x = df[col].to_numpy()
    return (x[:n_points] if n_points else x), str(p)


def _build_model(name: str, n_states: int):
    from . import models
    return models.PoissonHMM(n_states) if name == "poisson-hmm" else models.GaussianHMM(n_states)


def demo(args) -> dict:
    """Run the demo described in the module docstring; return the JSON summary."""
    import approxcv as acv
    from .plot import scatter, timing_bars

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    x, source = _load_series(args.data, args.n_points)
    model = _build_model(args.model, args.n_states)
    say = (lambda *a: None) if args.quiet else (lambda *a: print(*a, flush=True))
    say(f"data: {source}, T = {len(x)}; model: {model}")
    t = time.perf_counter()
    params = model.fit(x)
    fit_seconds = time.perf_counter() - t
    say(f"fitted in {fit_seconds:.2f} s (best of {model.n_init} starts)")

    make = acv.folds.iid if args.folds == "iid" else acv.folds.contiguous
    folds = make(len(x), args.frac, args.n_folds, seed=args.seed)
    say(f"IJ on {len(folds)} {args.folds} folds leaving out {args.frac:.0%} each ...")
    ij = acv.cross_validate(model, x, folds, method="ij", params=params, scheme=args.scheme,
                            progress=not args.quiet)
    n_exact = min(args.n_exact, len(folds))
    say(f"exact CV on {n_exact} of them (refits warm-started at the fit) ...")
    exact = acv.cross_validate(model, x, folds.subset(np.arange(n_exact)), method="exact",
                               params=params, scheme=args.scheme, progress=not args.quiet)
    df = acv.compare(ij, exact)
    exact_per_fold = exact.seconds / n_exact
    ij_per_fold = ij.seconds / len(folds)
    table = [
        ("folds (IJ / exact)", f"{len(folds)} / {n_exact}"),
        ("IJ mean rel. error, per point", f"{df.attrs['mean_rel_error_point']:.3e}"),
        ("IJ mean rel. error, per fold", f"{df.attrs['mean_rel_error_fold']:.3e}"),
        ("IJ time, all folds [s]", f"{ij.seconds:.2f}"),
        ("  derivatives / solve / held-out [s]",
         " / ".join(f"{ij.stage_seconds[k]:.2f}" for k in ("derivatives", "solve", "heldout"))),
        ("exact time per fold [s]", f"{exact_per_fold:.3f}"),
        (f"exact time for all {len(folds)} folds (extrapolated) [s]",
         f"{exact_per_fold * len(folds):.1f}"),
        ("speed-up of IJ per fold", f"{exact_per_fold / ij_per_fold:.0f}x"),
        ("gradient norm at the fit", f"{ij.diagnostics['grad_norm']:.2e}"),
        ("Hessian min eigenvalue / jitter",
         f"{ij.diagnostics['hessian_min_eig']:.3g} / {ij.diagnostics['jitter']:.1g}"),
    ]
    width = max(len(k) for k, _ in table)
    say("")
    for k, v in table:
        say(f"  {k:<{width}}  {v}")
    scatter(ij, exact, kind="point", path=out / "scatter_points.png")
    scatter(ij, exact, kind="fold", path=out / "scatter_folds.png")
    timing_bars({"IJ (all folds)": ij.seconds,
                 "exact (measured)": exact.seconds,
                 "exact (all folds, extrapolated)": exact_per_fold * len(folds)},
                path=out / "timing.png")
    df.to_csv(out / "comparison.csv", index=False)
    summary = {
        "data": source, "T": int(len(x)), "model": repr(model), "scheme": args.scheme,
        "fold_scheme": args.folds, "frac": args.frac, "n_folds": len(folds), "n_exact": n_exact,
        "fit_seconds": fit_seconds, "ij_seconds": ij.seconds, "ij_stage_seconds": ij.stage_seconds,
        "exact_seconds": exact.seconds, "exact_seconds_per_fold": exact_per_fold,
        "speedup_per_fold": exact_per_fold / ij_per_fold,
        "mean_rel_error_point": df.attrs["mean_rel_error_point"],
        "mean_rel_error_fold": df.attrs["mean_rel_error_fold"],
        "exact_converged": bool(np.all(exact.diagnostics["exact_converged"])),
        "diagnostics": {k: v for k, v in ij.diagnostics.items() if np.isscalar(v)},
        "params": {k: np.asarray(v).tolist() for k, v in params._asdict().items()},
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=2, default=float))
    say(f"\nwrote {out}/summary.json, scatter_points.png, scatter_folds.png, timing.png, "
        "comparison.csv")
    return summary


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="approxcv", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="IJ vs exact CV of an HMM on the shipped call-volume data")
    d.add_argument("--data", help="CSV (column 'calls' or the last column) or .npy series; "
                   "default: the shipped call-volume series")
    d.add_argument("--model", choices=MODELS, default="poisson-hmm")
    d.add_argument("--n-states", type=int, default=2)
    d.add_argument("--n-points", type=int, default=5000, help="use the first N points")
    d.add_argument("--folds", choices=("iid", "contiguous"), default="iid")
    d.add_argument("--frac", type=float, default=0.1, help="fraction left out per fold")
    d.add_argument("--n-folds", type=int, default=1000)
    d.add_argument("--n-exact", type=int, default=10, help="folds checked by exact refits")
    d.add_argument("--scheme", choices=("A", "B"), default="A")
    d.add_argument("--seed", type=int, default=0)
    d.add_argument("--out", default="approxcv-demo", help="output directory")
    d.add_argument("--quiet", action="store_true", help="no progress or table")
    return parser


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "demo":
        from .errors import ApproxCVError
        try:
            demo(args)
        except ApproxCVError as err:
            print(f"approxcv: {err}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
