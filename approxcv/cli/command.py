"""The ``approxcv`` command.

``approxcv demo`` fits a hidden Markov model to the shipped call-volume series (or your own
data), estimates cross-validation on many folds with the infinitesimal jackknife, checks a
few folds by exact refits, and writes a comparison table, a scatter plot, a JSON summary and
both results (``results/ij`` and ``results/exact``, :meth:`CVResult.save`); ``--report``
adds the HTML report. ``approxcv report RESULT_DIR`` writes that report from any directory
of saved results (:mod:`approxcv.report`), re-running nothing.

Every option is checked before anything is fitted: a bad one ends the command with one line
``approxcv demo: error: --option: what is wrong`` on stderr and exit status 2 — as does a
failure to write the results under ``--out`` (a full disk, a directory made read-only).
``approxcv report`` does the same: ``approxcv report: error: RESULT_DIR: ...`` for a missing
or empty directory or one where no result can be read, ``--out: ...`` for a report it cannot
write. A file it cannot read beside results it can is skipped, named on stderr
(``approxcv report: skipped 'PATH': why``) and on the page.
"""
from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path


from .._version import __version__
from ..errors import (ApproxCVError, FitError, InvalidDataError, ResultFileError,
                      ResultWriteError)
from .args import (DEFAULT_N_EXACT, DEFAULT_N_POINTS, MODELS, _BadOption, _fraction,
                        _int_at_least, _nonempty, _one_line, _Parser, validate)


def _build_model(name: str, n_states: int):
    from .. import models
    return models.PoissonHMM(n_states) if name == "poisson-hmm" else models.GaussianHMM(n_states)


def _write(path: Path, write) -> None:
    """``write(path)``; an ``OSError`` or a :class:`~approxcv.errors.ResultWriteError` (no
    space left, permission denied) becomes a bad ``--out`` naming the file."""
    try:
        write(path)
    except ResultWriteError as err:
        raise _BadOption("--out", _one_line(err)) from None
    except OSError as err:
        raise _BadOption("--out", f"cannot write {str(path)!r}: "
                         f"{_one_line(err.strerror or err)}") from None


def demo(args, data: tuple | None = None) -> dict:
    """Run the demo described in the module docstring; return the JSON summary.

    ``data`` is ``(x, source)`` from :func:`validate`; without it ``args`` are validated here.
    """
    import numpy as np      # not at import: `approxcv --help` stays light
    import approxcv as acv
    from ..report.plot import scatter, timing_bars

    x, source = validate(args) if data is None else data
    out = Path(args.out)
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
    n_exact = args.n_exact
    say(f"exact CV on {n_exact} of them (refits warm-started at the fit) ...")
    exact = acv.cross_validate(model, x, folds.subset(np.arange(n_exact)), method="exact",
                               params=params, scheme=args.scheme, progress=not args.quiet)
    df = acv.accuracy(ij, exact)
    est = _error_estimates(ij, exact, df)
    exact_per_fold = exact.seconds / n_exact
    ij_per_fold = ij.seconds / len(folds)
    table = [
        ("folds (IJ / exact)", f"{len(folds)} / {n_exact}"),
        ("unreliable folds (IJ / exact), left out of the errors",
         f"{len(ij.diagnostics['unreliable_folds'])} / "
         f"{len(exact.diagnostics['unreliable_folds'])}"),
        ("IJ mean rel. error, per point", f"{df.attrs['mean_rel_error_point']:.3e}"),
        ("IJ mean rel. error, per fold", f"{df.attrs['mean_rel_error_fold']:.3e}"),
        ("IJ estimated error, per fold: mean on the exact folds",
         f"{est['mean_estimate_exact_folds']:.3e}"),
        (f"IJ folds whose estimated error exceeds tol = {est['tol']:.0%}",
         f"{est['n_above_tol']} of {len(folds)}"),
        ("IJ time, all folds [s]", f"{ij.seconds:.2f}"),
        (f"  {' / '.join(ij.stage_seconds).replace('_', ' ')} [s]",
         " / ".join(f"{v:.2f}" for v in ij.stage_seconds.values())),
        (f"exact time per fold (warm start + {exact.diagnostics['exact_restarts']} restarts) [s]",
         f"{exact_per_fold:.3f}"),
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
    _write(out / "scatter_points.png", lambda p: scatter(ij, exact, kind="point", path=p))
    _write(out / "scatter_folds.png", lambda p: scatter(ij, exact, kind="fold", path=p))
    timings = {"IJ": ij.seconds, "exact (measured)": exact.seconds,
               "exact (extrapolated)": exact_per_fold * len(folds)}
    n_folds = {"IJ": len(folds), "exact (measured)": n_exact,
               "exact (extrapolated)": len(folds)}
    _write(out / "timing.png", lambda p: timing_bars(timings, n_folds, path=p))
    _write(out / "comparison.csv", lambda p: df.to_csv(p, index=False))
    summary = {
        "data": source, "T": int(len(x)), "model": repr(model), "scheme": args.scheme,
        "fold_scheme": args.folds, "frac": args.frac, "n_folds": len(folds), "n_exact": n_exact,
        "fit_seconds": fit_seconds, "ij_seconds": ij.seconds, "ij_stage_seconds": ij.stage_seconds,
        "exact_seconds": exact.seconds, "exact_seconds_per_fold": exact_per_fold,
        "speedup_per_fold": exact_per_fold / ij_per_fold,
        "mean_rel_error_point": df.attrs["mean_rel_error_point"],
        "mean_rel_error_fold": df.attrs["mean_rel_error_fold"],
        "error_estimate": est,
        "exact_converged": bool(np.all(exact.diagnostics["exact_converged"])),
        "exact_restarts": exact.diagnostics["exact_restarts"],
        "unreliable_folds_ij": ij.diagnostics["unreliable_folds"].tolist(),
        "unreliable_folds_exact": exact.diagnostics["unreliable_folds"].tolist(),
        "diagnostics": {k: v for k, v in ij.diagnostics.items() if np.isscalar(v)},
        "params": {k: np.asarray(v).tolist() for k, v in params._asdict().items()},
    }
    text = json.dumps(summary, indent=2, default=float)
    _write(out / "summary.json", lambda p: p.write_text(text))
    for name, res in (("ij", ij), ("exact", exact)):
        _write(out / "results" / f"{name}.json", lambda p: res.save(p, model=model))
    say(f"\nwrote {out}/summary.json, scatter_points.png, scatter_folds.png, timing.png, "
        "comparison.csv, results/ij.{json,npz}, results/exact.{json,npz}")
    if args.report:
        from ..report import build_report
        _write(out / "report.html", lambda p: build_report(out, p))
        say(f"wrote {out}/report.html")
    return summary


def report(args) -> Path:
    """Write the HTML report of ``args.result_dir`` (to ``args.out``, atomically); return its
    path. Every file skipped (cannot be read as a result) is named on stderr, one line
    each, and on the page. Raises :class:`_BadOption` naming ``RESULT_DIR`` (also where no
    result could be read) or ``--out``."""
    from ..report import nothing_read, read_summary, report_html, report_path
    from ..results.storage import scan_results, write_atomic
    where = Path(args.result_dir)
    if not where.exists():
        raise _BadOption("RESULT_DIR", f"{args.result_dir!r} does not exist")
    if not where.is_dir():
        raise _BadOption("RESULT_DIR", f"{args.result_dir!r} is not a directory")
    try:
        (saved, skipped), summary = scan_results(where), read_summary(where)
    except ResultFileError as err:
        raise _BadOption("RESULT_DIR", str(err)) from None
    except OSError as err:
        raise _BadOption("RESULT_DIR", f"cannot read {str(err.filename or where)!r}: "
                         f"{_one_line(err.strerror or err)}") from None
    if not saved:
        raise _BadOption("RESULT_DIR", nothing_read(args.result_dir, skipped))
    for s in skipped:
        print(f"approxcv report: skipped {str(s.path)!r}: {_one_line(s.reason)}",
              file=sys.stderr)
    out = report_path(where, args.out)
    if not out.parent.is_dir():      # before the report is built
        raise _BadOption("--out", f"cannot write {str(out)!r}: {str(out.parent)!r} is not a "
                         "directory")
    text = report_html(saved, where, summary, skipped)
    _write(out, lambda p: write_atomic(p, text))
    if not args.quiet:
        print(f"wrote {out}")
    return out


def _error_estimates(ij, exact, df) -> dict:
    """The IJ's per-fold error estimates beside the measured errors: adds the column
    ``error_estimate`` to the fold rows of ``df`` and returns the figures the demo prints."""
    import numpy as np      # not at import: `approxcv --help` stays light
    est = np.asarray(ij.error_estimate)
    by_id = dict(zip(ij.fold_ids.tolist(), est.tolist()))
    folds = df["kind"] == "fold"
    df["error_estimate"] = np.where(folds, df["fold_id"].map(by_id), np.nan)
    shared = np.isin(ij.fold_ids, exact.fold_ids)
    tol = float(ij.diagnostics["tol"])
    ids = ij.fold_ids[shared]
    measured = df.loc[folds].set_index("fold_id")["rel_error"].reindex(ids)
    return {"tol": tol, "n_above_tol": int(np.sum(~(est <= tol))),
            "mean_estimate_all_folds": float(np.mean(est)),
            "mean_estimate_exact_folds": float(np.mean(est[shared])),
            "per_exact_fold": {"fold_id": ids.tolist(), "estimate": est[shared].tolist(),
                               "measured": measured.tolist()}}


#: what ``approxcv --help`` says first: plain text, no reStructuredText markup
DESCRIPTION = ("Approximate cross-validation. 'approxcv demo' fits a hidden Markov model, "
               "estimates many folds by the infinitesimal jackknife and checks a few by exact "
               "refits; 'approxcv report RESULT_DIR' writes one HTML page from saved results.")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="approxcv", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=f"approxcv {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)
    d = sub.add_parser("demo", help="IJ vs exact CV of an HMM on the shipped call-volume data")
    d.add_argument("--data", type=_nonempty,
                   help="CSV (column 'calls' or the last column; a file whose first line is all "
                   "numbers has no header) or .npy series; default: the shipped call-volume "
                   "series. Missing, NaN or infinite values are refused; poisson-hmm needs "
                   "non-negative integer counts")
    d.add_argument("--model", choices=MODELS, default="poisson-hmm")
    d.add_argument("--n-states", type=_int_at_least(1, "a positive integer"), default=2,
                   help="hidden states, at most the number of points (default 2)")
    d.add_argument("--n-points", type=_int_at_least(2, "an integer >= 2"), default=None,
                   help=f"use the first N points; N larger than the data is an error "
                   f"(default: {DEFAULT_N_POINTS}, or all points if there are fewer)")
    d.add_argument("--folds", choices=("iid", "contiguous"), default="iid")
    d.add_argument("--frac", type=_fraction, default=0.1,
                   help="fraction left out per fold, in (0, 1); it must leave out at least one "
                   "point (default 0.1)")
    d.add_argument("--n-folds", type=_int_at_least(1, "a positive integer"), default=1000,
                   help="folds estimated by IJ (default 1000)")
    d.add_argument("--n-exact", type=_int_at_least(1, "a positive integer"), default=None,
                   help="how many of the folds to check by exact refits, 1 to --n-folds (the "
                   f"comparison is the point of the demo, so 0 is refused; default: "
                   f"{DEFAULT_N_EXACT}, or --n-folds if smaller)")
    d.add_argument("--scheme", choices=("A", "B"), default="A")
    d.add_argument("--seed", type=_int_at_least(0, "a non-negative integer"), default=0,
                   help="seed of the fold draws (default 0)")
    d.add_argument("--out", type=_nonempty, default="approxcv-demo",
                   help="output directory, created if missing (default approxcv-demo)")
    d.add_argument("--quiet", action="store_true", help="no progress or table")
    d.add_argument("--report", action="store_true",
                   help="also write the HTML report, OUT/report.html (approxcv report)")
    r = sub.add_parser("report", help="one self-contained HTML page from saved results")
    r.add_argument("result_dir", metavar="RESULT_DIR", type=_nonempty,
                   help="directory of saved results (CVResult.save; approxcv demo's --out), "
                   "read with its results/ folder and the demo's summary.json if present")
    r.add_argument("--out", type=_nonempty, default=None,
                   help="the HTML file to write; a directory gets report.html in it "
                   "(default RESULT_DIR/report.html)")
    r.add_argument("--quiet", action="store_true", help="do not print the path written")
    parser.subparsers = {"demo": d, "report": r}
    return parser


# backticked argument names in approxcv's error messages -> the demo option they come from
_OPTION_OF = {"n_states": "--n-states", "frac": "--frac", "n_folds": "--n-folds",
              "folds": "--n-folds", "seed": "--seed", "scheme": "--scheme", "x": "--data",
              "data": "--data", "n": "--n-points"}


def _option_of(err) -> str | None:
    """The demo option an approxcv error raised during the run can be blamed on, if any."""
    for name in re.findall(r"`([A-Za-z_]+)`", str(err)):
        if name in _OPTION_OF:
            return _OPTION_OF[name]
    return "--data" if isinstance(err, (InvalidDataError, FitError)) else None


def main(argv=None) -> int:
    """Run the ``approxcv`` command; return its exit status (2 for a bad option)."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exc:  # --help (0) or a bad option (2, one line already printed)
        return exc.code if isinstance(exc.code, int) else 2
    if args.command == "report":
        try:
            report(args)
        except _BadOption as err:
            sub = parser.subparsers["report"]
            print(f"{sub.prog}: error: {err.option}: {_one_line(err)}", file=sys.stderr)
            return 2
    if args.command == "demo":
        sub = parser.subparsers["demo"]
        try:
            demo(args, validate(args))
        except _BadOption as err:
            print(f"{sub.prog}: error: {err.option}: {_one_line(err)}", file=sys.stderr)
            return 2
        except ApproxCVError as err:
            option = _option_of(err)
            where = f"{option}: " if option else ""
            print(f"{sub.prog}: error: {where}{_one_line(err)}", file=sys.stderr)
            return 2
        except OSError as err:
            if err.filename is None or Path(args.out).resolve() not in \
                    Path(str(err.filename)).resolve().parents:
                raise
            print(f"{sub.prog}: error: --out: cannot write {str(err.filename)!r}: "
                  f"{_one_line(err.strerror or err)}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
