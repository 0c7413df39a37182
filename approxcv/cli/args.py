"""Argument checks of the ``approxcv`` command: every option is validated before anything
is fitted, and a bad one is one line naming it (exit status 2)."""
from __future__ import annotations

import argparse
import math
import os
import re
from pathlib import Path


MODELS = ("poisson-hmm", "gaussian-hmm")
DEFAULT_N_POINTS = 5000
DEFAULT_N_EXACT = 10
# memory the IJ run holds per fold and per left-out point (index arrays of the folds, padded
# indices, point losses, per-fold arrays): an estimate, generous rather than tight
BYTES_PER_FOLD, BYTES_PER_POINT = 1024, 64


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
    import numpy as np      # not at import: `approxcv --help` stays light
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
    import numpy as np      # not at import: `approxcv --help` stays light
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
    from .. import datasets
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


def _memory_bytes() -> int:
    """Physical memory of this machine (16 GiB where the platform does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, OSError, ValueError):
        return 16 * 2 ** 30


def _check_fold_memory(n_folds: int, fold_size: int) -> None:
    """Refuse ``--n-folds`` whose folds and per-point results would not fit in half of the
    machine's memory (they would fill it and fail long after the fit)."""
    need = n_folds * (BYTES_PER_FOLD + BYTES_PER_POINT * fold_size)
    limit = _memory_bytes() // 2
    if need > limit:
        most = max(1, limit // (BYTES_PER_FOLD + BYTES_PER_POINT * fold_size))
        raise _BadOption("--n-folds", f"{n_folds} folds of {fold_size} points need about "
                         f"{need / 2 ** 30:.3g} GiB, more than half of this machine's "
                         f"{2 * limit / 2 ** 30:.3g} GiB of memory; use at most {most}")


def validate(args) -> tuple[np.ndarray, str]:
    """Check the options of ``approxcv demo`` against each other and the data, before any
    fitting; resolve the defaults of ``--n-points`` and ``--n-exact``; create ``--out``.

    Returns ``(x, source)``, the series to use. Raises :class:`_BadOption` naming the flag.
    """
    import numpy as np      # not at import: `approxcv --help` stays light
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
    _check_fold_memory(args.n_folds, math.floor(args.frac * n))
    if args.n_exact is None:
        args.n_exact = min(DEFAULT_N_EXACT, args.n_folds)
    elif args.n_exact > args.n_folds:
        raise _BadOption("--n-exact", f"{args.n_exact} exact refits but only "
                         f"--n-folds {args.n_folds} folds")
    _check_out(args.out)
    return x, source
