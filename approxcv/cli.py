"""The ``approxcv`` command.

``approxcv demo`` fits a hidden Markov model to the shipped call-volume series (or your own
data), estimates cross-validation on many folds with the infinitesimal jackknife, checks a
few folds by exact refits, and writes a comparison table, a scatter plot and a JSON summary.

Every option is checked before anything is fitted: a bad one ends the command with one line
``approxcv demo: error: --option: what is wrong`` on stderr and exit status 2.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from pathlib import Path

import numpy as np

MODELS = ("poisson-hmm", "gaussian-hmm")
DEFAULT_N_POINTS = 5000
DEFAULT_N_EXACT = 10


class _Parser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line, ``prog: error: --option: message``
    (no usage block), exit status 2; subparsers inherit it."""

    def error(self, message):
        message = re.sub(r"^argument ([^:]+): ", r"\1: ", str(message))
        self.exit(2, f"{self.prog}: error: {_one_line(message)}\n")


def _one_line(text) -> str:
    return " ".join(str(text).split())


def _int_at_least(minimum: int, what: str):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"must be {what}, got {value}")
        return value
    parse.__name__ = what
    return parse


def _fraction(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"must be a number strictly between 0 and 1, got {text!r}") from None
    if not 0.0 < value < 1.0:  # also rejects nan and inf
        raise argparse.ArgumentTypeError(
            f"must be a number strictly between 0 and 1, got {text!r}")
    return value


def _nonempty(text: str) -> str:
    if not text.strip():
        raise argparse.ArgumentTypeError("must not be empty")
    return text


class _BadOption(Exception):
    """A bad option found after parsing: ``option`` is its flag, the message says why."""

    def __init__(self, option: str, message: str):
        super().__init__(message)
        self.option = option


def _read_table(p: Path):
    """Return the column of the CSV ``p`` to use (``calls`` or the last column) as a pandas
    Series and its name. A file whose first line is all numbers is read as headerless."""
    import pandas as pd

    def read(**kw):
        try:
            return pd.read_csv(p, **kw)
        except pd.errors.EmptyDataError:
            raise _BadOption("--data", f"{str(p)!r} is empty") from None
        except UnicodeDecodeError:
            raise _BadOption("--data", f"{str(p)!r} is not a text (CSV) file") from None
        except (pd.errors.ParserError, ValueError) as err:
            raise _BadOption("--data", f"cannot parse {str(p)!r} as CSV: {err}") from None

    df = read()
    names = [str(c) for c in df.columns]

    def number(s):
        try:
            float(s)
            return True
        except ValueError:
            return False

    headerless = bool(names) and all(number(c) for c in names)
    if headerless:
        df = read(header=None)  # no header line: the first line is data
    if df.shape[1] == 0:
        raise _BadOption("--data", f"{str(p)!r} has no columns")
    if df.shape[0] == 0:
        raise _BadOption("--data", f"{str(p)!r} has a header line but no data rows")
    col = "calls" if "calls" in df.columns else df.columns[-1]
    where = (repr(str(p)) if headerless and df.shape[1] == 1
             else f"column {str(col)!r} of {str(p)!r}")
    return df[col], where


def _read_data(path: str):
    """Read ``--data``: return ``(values, description)`` where ``values`` is a pandas Series
    (CSV) or a NumPy array (.npy), not yet checked for numbers."""
    p = Path(path)
    if not p.exists():
        raise _BadOption("--data", f"file {path!r} does not exist")
    if p.is_dir():
        raise _BadOption("--data", f"{path!r} is a directory, not a file")
    try:
        with open(p, "rb") as f:
            magic = f.read(6)
    except OSError as err:
        raise _BadOption("--data", f"cannot read {path!r}: {err.strerror or err}") from None
    if p.suffix == ".npy":
        if magic != b"\x93NUMPY":
            raise _BadOption("--data", f"{path!r} is not a .npy file")
        try:
            x = np.load(p, allow_pickle=False)
        except Exception as err:  # noqa: BLE001 - any failure to load is a bad file
            raise _BadOption("--data", f"cannot read {path!r} as a .npy array: "
                             f"{type(err).__name__}: {err}") from None
        if not isinstance(x, np.ndarray):
            raise _BadOption("--data", f"{path!r} is not a single .npy array")
        return x, repr(path)
    return _read_table(p)


def _check_values(values, where: str, model: str) -> np.ndarray:
    """Return the (already sliced) series as a NumPy array after checking it suits ``model``."""
    import pandas as pd
    if isinstance(values, pd.Series):
        if values.dtype == bool:
            raise _BadOption("--data", f"{where} holds True/False values, not numbers")
        if not pd.api.types.is_numeric_dtype(values):
            numeric = pd.to_numeric(values, errors="coerce")
            bad = np.flatnonzero(numeric.isna().to_numpy() & values.notna().to_numpy())
            if bad.size:
                raise _BadOption("--data", f"{where} is not numeric "
                                 f"(data row {bad[0] + 1}: {values.iloc[bad[0]]!r})")
            values = numeric
        x, at = values.to_numpy(), (lambda i: f"data row {i + 1}")
    else:
        x, at = np.asarray(values), (lambda i: f"index {i}")
        if x.dtype.kind not in "iuf":
            raise _BadOption("--data", f"{where} must hold numbers, got dtype {x.dtype}")
        if x.ndim != 1 and not (model == "gaussian-hmm" and x.ndim == 2):
            need = "1-D (or 2-D for gaussian-hmm)" if model == "gaussian-hmm" else "1-D"
            raise _BadOption("--data", f"{where} must be a {need} array, got shape {x.shape}")
        if x.ndim == 2 and x.shape[1] == 0:
            raise _BadOption("--data", f"{where} has no columns, shape {x.shape}")
    bad = np.flatnonzero(~np.isfinite(x).reshape(x.shape[0], -1).all(1))
    if bad.size:
        raise _BadOption("--data", f"{where} has {bad.size} missing, NaN or infinite value(s) "
                         f"(first at {at(bad[0])})")
    if model == "poisson-hmm":
        bad = np.flatnonzero((x != np.round(x)) | (x < 0))
        if bad.size:
            raise _BadOption("--data", f"{where}: poisson-hmm needs non-negative integer counts, "
                             f"got {x[bad[0]]} at {at(bad[0])}")
    return x


def _load_series(path: str | None):
    """Return ``(x, where, source)``: the whole series of ``--data`` (values not yet checked)
    or the shipped call-volume series, a description for messages and one for the summary."""
    from . import datasets
    if path is None:
        source = "calls (fpp2, 5-minute call volumes; shipped)"
        return datasets.load_calls(), "the shipped series", source
    values, where = _read_data(path)
    return values, where, str(Path(path))


def _check_out(path: str) -> Path:
    """Check that ``--out`` is, or can be created as, a writable directory; create it."""
    out = Path(path)
    if out.exists() and not out.is_dir():
        raise _BadOption("--out", f"{path!r} exists and is not a directory")
    ancestor = out
    while not ancestor.exists() and ancestor != ancestor.parent:
        ancestor = ancestor.parent
    if ancestor != out and ancestor.exists() and not ancestor.is_dir():
        raise _BadOption("--out", f"cannot create {path!r}: {str(ancestor)!r} is a file, "
                         "not a directory")
    if ancestor.exists() and not os.access(ancestor, os.W_OK | os.X_OK):
        what = "directory" if ancestor == out else f"cannot create {path!r}: directory"
        raise _BadOption("--out", f"{what} {str(ancestor)!r} is not writable")
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise _BadOption("--out", f"cannot create directory {path!r}: "
                         f"{err.strerror or err}") from None
    return out


def validate(args) -> tuple[np.ndarray, str]:
    """Check the options of ``approxcv demo`` against each other and the data, before any
    fitting; resolve the defaults of ``--n-points`` and ``--n-exact``; create ``--out``.

    Returns ``(x, source)``, the series to use. Raises :class:`_BadOption` naming the flag.
    """
    values, where, source = _load_series(args.data)
    total = len(values) if np.ndim(values) else 0
    if total < 2:
        raise _BadOption("--data", f"{where} has {total} data point(s); at least 2 are needed")
    if args.n_points is None:
        args.n_points = min(DEFAULT_N_POINTS, total)
    elif args.n_points > total:
        raise _BadOption("--n-points", f"{args.n_points} is more than the {total} points of "
                         f"{where}")
    values = values[:args.n_points]
    x = values if args.data is None else _check_values(values, where, args.model)
    n = len(x)
    if args.n_states > n:
        raise _BadOption("--n-states", f"{args.n_states} states for {n} data points")
    if math.floor(args.frac * n) < 1:
        raise _BadOption("--frac", f"{args.frac} of {n} points leaves out no point per fold; "
                         "use a larger --frac or more points")
    if args.n_exact is None:
        args.n_exact = min(DEFAULT_N_EXACT, args.n_folds)
    elif args.n_exact > args.n_folds:
        raise _BadOption("--n-exact", f"{args.n_exact} exact refits but only "
                         f"--n-folds {args.n_folds} folds")
    _check_out(args.out)
    return x, source


def _build_model(name: str, n_states: int):
    from . import models
    return models.PoissonHMM(n_states) if name == "poisson-hmm" else models.GaussianHMM(n_states)


def demo(args, data: tuple | None = None) -> dict:
    """Run the demo described in the module docstring; return the JSON summary.

    ``data`` is ``(x, source)`` from :func:`validate`; without it ``args`` are validated here.
    """
    import approxcv as acv
    from .plot import scatter, timing_bars

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
    parser = _Parser(prog="approxcv", description=__doc__.split("\n\n")[0])
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
    parser.subparsers = {"demo": d}
    return parser


# backticked argument names in approxcv's error messages -> the demo option they come from
_OPTION_OF = {"n_states": "--n-states", "frac": "--frac", "n_folds": "--n-folds",
              "folds": "--n-folds", "seed": "--seed", "scheme": "--scheme", "x": "--data",
              "data": "--data", "n": "--n-points"}


def _option_of(err) -> str | None:
    """The demo option an approxcv error raised during the run can be blamed on, if any."""
    from .errors import FitError, InvalidDataError
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
    if args.command == "demo":
        from .errors import ApproxCVError
        sub = parser.subparsers["demo"]
        try:
            data = validate(args)
        except _BadOption as err:
            print(f"{sub.prog}: error: {err.option}: {_one_line(err)}", file=sys.stderr)
            return 2
        try:
            demo(args, data)
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
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
