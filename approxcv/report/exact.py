"""The report's comparison with exact CV: approximate and exact results of the same model
paired on their shared folds (:func:`~approxcv.results.accuracy`), and the per-fold error
estimates against the errors the exact refits measured."""
from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd

from ..errors import InvalidArgumentError
from ..results import accuracy
from ..results.storage import SavedResult
from . import markup as H
from .plot import figure_axes, scatter

MAX_ROWS = 50       # rows of a per-fold table before it is cut (the note says how many)


class Pair(NamedTuple):
    """An approximate result and an exact one of the same model sharing folds, with their
    :func:`accuracy` table (``None`` and ``problem`` set if they cannot be compared)."""
    approx: SavedResult
    exact: SavedResult
    table: pd.DataFrame | None
    problem: str | None


def model_name(s: SavedResult) -> str:
    """The model recorded with ``s``, or an en dash."""
    return s.model or "–"


def result_name(s: SavedResult) -> str:
    """``label (method)``, how a result is named in headings and bars."""
    return f"{s.label} ({s.result.method})"


def data_digest(s: SavedResult) -> str | None:
    """The digest of the data ``s`` was computed on (its fingerprint), or ``None``."""
    fp = s.result.fingerprint
    return fp.get("data") if isinstance(fp, dict) else None


def find_pairs(saved: list[SavedResult]) -> list[Pair]:
    """Every (approximate, exact) pair with the same model, scheme and level and at least
    one fold id in common. Only a pair whose fingerprints show the same data and units is
    compared; the others are listed with why not (other data, units or level, or a result
    without a fingerprint), never compared."""
    pairs = []
    for e in (s for s in saved if s.result.method == "exact"):
        for a in (s for s in saved if s.result.method != "exact"):
            same = (a.model == e.model and a.result.scheme == e.result.scheme
                    and a.result.level == e.result.level)
            if not same or not np.intersect1d(a.result.fold_ids, e.result.fold_ids).size:
                continue
            lacking = [s.label for s in (a, e) if data_digest(s) is None]
            if lacking:
                pairs.append(Pair(a, e, None, f"{' and '.join(map(repr, lacking))} carr"
                                  f"{'y' if len(lacking) > 1 else 'ies'} no fingerprint of "
                                  "its data (saved by an older approxcv, or built by hand), so "
                                  "nothing shows that both were computed on the same data"))
                continue
            try:
                pairs.append(Pair(a, e, accuracy(a.result, e.result), None))
            except InvalidArgumentError as err:
                pairs.append(Pair(a, e, None, str(err)))
    return pairs


def compared(pairs: list[Pair]) -> list[Pair]:
    """The pairs that were compared (their fingerprints match)."""
    return [p for p in pairs if p.table is not None]


def _pair_summary(p: Pair) -> str:
    """Key figures of a compared pair: shared folds, mean and largest relative errors
    (reliable folds), time per fold of each and the speed-up."""
    df, a, e = p.table, p.approx.result, p.exact.result
    folds = df[df.kind == "fold"]
    good = folds[~folds.unreliable]
    rows = [("folds compared (shared fold ids)", len(folds)),
            ("of them unreliable in either result (left out below)", int(folds.unreliable.sum())),
            ("mean relative error, per point", df.attrs["mean_rel_error_point"]),
            ("mean relative error, per fold", df.attrs["mean_rel_error_fold"]),
            ("largest relative error, per fold",
             float(good.rel_error.max()) if len(good) else np.nan),
            ("time per fold, approximate [s]", a.seconds / len(a)),
            ("time per fold, exact [s]", e.seconds / len(e)),
            ("speed-up per fold", (e.seconds / len(e)) / (a.seconds / len(a))
             if a.seconds > 0 else np.nan)]
    return H.key_values(rows)


def _pair_figures(p: Pair) -> str:
    """Approximate against exact losses per point and per fold, side by side."""
    figs = []
    for kind in ("point", "fold"):
        fig, ax = figure_axes((4.6, 4.4))
        err = p.table.attrs[f"mean_rel_error_{kind}"]
        scatter(p.approx.result, p.exact.result, kind=kind, ax=ax,
                title=f"per {kind}: mean rel. error {err:.2e}")
        figs.append(H.figure(fig, f"{p.approx.result.method.upper()} against exact CV, per "
                             f"{kind}, on the shared folds (the mean relative error in the "
                             "title is over the reliable ones); dashed: x = y.",
                             f"scatter per {kind}"))
    return f'<div class="figs">{"".join(figs)}</div>'


def approx_exact_section(pairs: list[Pair]) -> tuple:
    """``(anchor, title, body)``: every approximate/exact pair, or why there is none."""
    parts = []
    for p in pairs:
        head = (f"<h3>{H.esc(result_name(p.approx))} against {H.esc(result_name(p.exact))}, model "
                f"{H.esc(model_name(p.approx))}</h3>")
        if p.table is None:
            parts.append(head + H.note(f"Not compared (no relative errors shown): {p.problem}"))
            continue
        folds = p.table[p.table.kind == "fold"]
        cols = ["fold_id", "approx", "exact", "abs_error", "rel_error", "unreliable"]
        parts.append(head + _pair_summary(p) + _pair_figures(p)
                     + H.table(folds[cols].head(MAX_ROWS), index=False)
                     + H.note(f"Fold losses of the {len(folds)} shared folds"
                              + (f" (first {MAX_ROWS})" if len(folds) > MAX_ROWS else "")
                              + "; all rows are in accuracy(approx, exact)."))
    if not parts:
        parts.append(H.note("No exact result here shares folds with an approximate result "
                            "of the same model, so there is no comparison with exact CV."))
    return "exact", "Approximate against exact CV", "\n".join(parts)


def _estimate_figure(s: SavedResult, est: np.ndarray, tol: float) -> str:
    """Histogram of ``log10`` of the positive finite error estimates, ``tol`` marked."""
    pos = est[np.isfinite(est) & (est > 0)]
    fig, ax = figure_axes((5, 3.4))
    if pos.size:
        ax.hist(np.log10(pos), bins=30, color="tab:blue", alpha=0.8)
    if tol > 0:
        ax.axvline(np.log10(tol), color="tab:red", ls="--", label=f"tol = {tol:g}")
        ax.legend()
    ax.set_xlabel("log10 estimated relative error of the fold loss")
    ax.set_ylabel("folds")
    ax.set_title(f"{s.label}: error estimates of {len(est)} folds")
    other = len(est) - pos.size
    return H.figure(fig, f"Estimated relative error of every fold of {s.label}"
                    + (f" ({other} fold(s) with an estimate of zero or not finite not drawn)"
                       if other else "") + "; folds right of the red line are unreliable.",
                    "histogram of error estimates")


def _measured_figure(p: Pair, table: pd.DataFrame) -> str:
    """Estimated against measured relative error of each exactly refitted fold (log-log)."""
    finite = np.isfinite(table.error_estimate) & np.isfinite(table.rel_error)
    ok = table[finite & (table.error_estimate > 0) & (table.rel_error > 0)]
    fig, ax = figure_axes((4.6, 4.4))
    ax.loglog(ok.rel_error, ok.error_estimate, "o", ms=5, alpha=0.8)
    if len(ok):
        lo = float(min(ok.rel_error.min(), ok.error_estimate.min()))
        hi = float(max(ok.rel_error.max(), ok.error_estimate.max()))
        ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="x = y")
        ax.legend(loc="upper left")
    ax.set_xlabel(f"measured relative error (exact: {p.exact.label})")
    ax.set_ylabel("estimated relative error")
    ax.set_title(f"{p.approx.label}: estimated vs measured")
    dropped = len(table) - len(ok)
    return H.figure(fig, "Each dot a fold refitted exactly: the estimate against the error "
                    "measured by the refit" + (f" ({dropped} fold(s) with a zero or non-finite "
                                               "error not drawn)" if dropped else "")
                    + ".", "estimated against measured errors")


def _estimates_of(s: SavedResult, pairs: list[Pair]) -> str:
    """One result's error estimates: statistics, histogram, and against every exact
    result it is paired with."""
    est = np.asarray(s.result.error_estimate, float)
    tol = float(s.result.diagnostics.get("tol", np.nan))
    finite = est[np.isfinite(est)]

    def stat(f):
        return float(f(finite)) if finite.size else np.nan
    rows = [("folds", len(est)), ("tol", tol),
            ("folds above tol (or not finite)", int(np.sum(~(est <= tol)))),
            ("folds whose estimate is not finite", int(len(est) - finite.size)),
            ("mean of the finite estimates", stat(np.mean)),
            ("median of the finite estimates", stat(np.median)),
            ("largest finite estimate", stat(np.max))]
    parts = [f"<h3>{H.esc(result_name(s))}</h3>", H.key_values(rows)]
    figs = [_estimate_figure(s, est, tol)]
    by_id = pd.Series(est, index=s.result.fold_ids)
    for p in (p for p in pairs if p.approx is s and p.table is not None):
        folds = p.table[p.table.kind == "fold"][["fold_id", "rel_error", "unreliable"]]
        folds = folds.assign(error_estimate=by_id.reindex(folds.fold_id).to_numpy())
        figs.append(_measured_figure(p, folds))
        parts.append(H.note(f"Against the exact refits of {p.exact.label}: the estimate of "
                            "each shared fold beside its measured relative error."))
        parts.append(H.table(folds.rename(columns={"rel_error": "measured"}).head(MAX_ROWS),
                             index=False))
    parts.insert(2, f'<div class="figs">{"".join(figs)}</div>')
    return "\n".join(parts)


def error_section(saved, pairs) -> tuple:
    """``(anchor, title, body)``: the error estimates of every result that has them."""
    with_est = [s for s in saved if s.result.error_estimate is not None]
    parts = [_estimates_of(s, pairs) for s in with_est] or [H.note(
        "No result here carries per-fold error estimates (the IJ and NS methods do).")]
    intro = H.note("The error estimate of a fold is its estimated relative error of the fold "
                   "loss against an exact refit (from two chord steps at the method's point); "
                   "where exact refits of the same folds are saved, it is shown against the "
                   "measured error.")
    return "errors", "Error estimates", intro + "\n".join(parts)
