"""Figures of results (matplotlib): :func:`compare`, a table of :func:`approxcv.compare` in
the layout of ArviZ's ``plot_compare``, and :func:`result`, what :meth:`CVResult.plot
<approxcv.results.CVResult.plot>` draws (a result's held-out losses against a reference's,
or along its folds).

Both draw on ``ax`` (a new figure from ``matplotlib.pyplot.subplots`` when it is ``None``)
with the Axes' own methods, return the Axes, and never show, save or change a global
setting (no ``rcParams``, no backend choice): ``ax.figure.savefig(path)`` saves. matplotlib is
imported when a figure is drawn, not with this module, which :class:`~approxcv.results.CVResult`
imports; so this module reads results by their attributes and imports no result type
(``CVResult.plot`` checks that two results were computed on the same inputs first).
"""
from __future__ import annotations

import numpy as np

from ._validate import check_choice
from .errors import ArgumentTypeError, InvalidArgumentError

__all__ = ["compare", "result"]

_BAD = {"color": "tab:red", "marker": "x", "s": 28, "linewidths": 1.2, "zorder": 3}


def _axes(ax, figsize):
    if ax is not None:
        return ax
    import matplotlib.pyplot as plt         # here: importing approxcv needs no matplotlib
    return plt.subplots(figsize=figsize, layout="tight")[1]


def compare(table, ax=None, *, title: str | None = None):
    """Plot a :func:`approxcv.compare` table as ArviZ's ``plot_compare`` does: one row per
    model in the table's order (the best on top); an open circle at its ``elpd`` with a
    ``± se`` bar, and for every other model a grey triangle just below at ``elpd_best -
    elpd_diff`` with the ``± dse`` bar of its difference to the best (the bar that decides
    whether the difference is real); a dashed vertical line at the best ``elpd``. Rows whose
    ``warning`` is set are drawn in red. Rows without an ``elpd`` (a :class:`~approxcv.
    selection.Selection`'s failed entries) are left out. Returns the Axes.

    Args:
        table: a DataFrame of :func:`approxcv.compare` (or a ``Selection.table``): columns
            ``elpd``, ``se``, ``elpd_diff``, ``dse``, optionally ``warning``.
        ax: the matplotlib Axes to draw on (``None``: a new figure).
        title: the Axes' title (``None``: a default).
    """
    missing = [c for c in ("elpd", "se", "elpd_diff", "dse") if c not in getattr(
        table, "columns", ())]
    if missing:
        raise ArgumentTypeError(f"`table` must be a table of approxcv.compare (a DataFrame "
                                f"with columns elpd, se, elpd_diff, dse); missing {missing}")
    elpd = np.asarray(table["elpd"], float)
    rows = np.flatnonzero(np.isfinite(elpd))
    if rows.size == 0:
        raise InvalidArgumentError("`table` has no row with a finite elpd to plot")
    ax = _axes(ax, (6, 0.6 * rows.size + 1.4))
    se, diff, dse = (np.asarray(table[c], float) for c in ("se", "elpd_diff", "dse"))
    warn = (np.asarray(table["warning"].fillna(False), bool) if "warning" in table.columns
            else np.zeros(len(table), bool))
    best = elpd[rows[0]]
    y = -np.arange(rows.size, dtype=float)
    for pos, (yi, i) in enumerate(zip(y, rows)):
        colour = "tab:red" if warn[i] else "k"
        ax.errorbar(elpd[i], yi, xerr=se[i], fmt="o", mfc="none", color=colour, capsize=3,
                    label="elpd ± se" if pos == 0 else None)
        if pos > 0:
            ax.errorbar(best - diff[i], yi - 0.25, xerr=dse[i], fmt="^", color="0.5",
                        capsize=3, label="elpd_diff ± dse (to the best)" if pos == 1 else None)
    ax.axvline(best, ls="--", color="0.6", lw=1)
    ax.set_yticks(y)
    ax.set_yticklabels([str(table.index[i]) for i in rows])
    unit = getattr(table, "attrs", {}).get("unit", "point")
    ax.set_xlabel("elpd (sum over left-out units)" if unit == "point"
                  else "elpd per fold (mean over folds)")
    ax.set_ylabel("model")
    ax.set_title(title or "model comparison")
    ax.legend(loc="best", fontsize="small")
    return ax


def _units(res) -> list:
    scored = getattr(res.folds, "scored", res.folds)     # the units of the point losses
    return [np.asarray(scored[i]) for i in range(len(res.fold_loss))]


def _paired(res, ref):
    """Indices ``(ia, ir)`` of the folds ``res`` and ``ref`` share (by fold id), which must
    leave out the same units."""
    _, ia, ir = np.intersect1d(np.asarray(res.fold_ids), np.asarray(ref.fold_ids),
                               return_indices=True)
    if ia.size == 0:
        raise InvalidArgumentError("the result and `exact` have no fold ids in common: plot "
                                   "an approximation against exact CV on the same folds")
    for i, j in zip(ia, ir):
        if not (np.array_equal(np.asarray(res.folds[i]), np.asarray(ref.folds[j]))
                and np.array_equal(np.asarray(getattr(res.folds, "scored", res.folds)[i]),
                                   np.asarray(getattr(ref.folds, "scored", ref.folds)[j]))):
            raise InvalidArgumentError(
                f"fold {int(np.asarray(res.fold_ids)[i])} leaves out different units in the "
                "result and in `exact`: they were run on other folds")
    return ia, ir


def result(res, ax=None, exact=None, *, kind: str = "fold", title: str | None = None):
    """What :meth:`CVResult.plot <approxcv.results.CVResult.plot>` draws (call that: it
    checks first that ``exact`` was computed on the same data, level and units).

    With ``exact`` (a result of ``method="exact"``, or any reference, on folds of the same
    ids): ``res``'s held-out losses (y) against ``exact``'s (x) on the folds both hold, one
    point per fold (``kind="fold"``) or per left-out unit (``kind="point"``), with the
    ``y = x`` line; folds unreliable in either result (:attr:`~approxcv.results.CVResult.
    unreliable`) are red crosses, the others blue dots.

    Without ``exact``: the held-out loss along the result (for a series: along time), each
    fold's ``fold_loss`` by its position in ``res.folds`` (``kind="fold"``) or each left-out
    unit's loss, ``-elpd_i``, by its unit index (``kind="point"``); the unreliable folds'
    values are marked with red crosses. Returns the Axes.
    """
    check_choice("kind", kind, ("fold", "point"))
    for name, r in (("result", res), ("exact", exact)):
        if r is not None and not all(hasattr(r, a) for a in ("fold_loss", "point_loss",
                                                              "folds", "unreliable")):
            raise ArgumentTypeError(f"`{name}` must be a CVResult, got {type(r).__name__}")
    ax = _axes(ax, (5, 4.5) if exact is not None else (7, 3.5))
    method = str(res.method).upper()
    bad = np.asarray(res.unreliable, bool)
    if exact is not None:
        ia, ir = _paired(res, exact)
        bad = bad[ia] | np.asarray(exact.unreliable, bool)[ir]
        if kind == "fold":
            x = np.asarray(exact.fold_loss, float)[ir]
            y = np.asarray(res.fold_loss, float)[ia]
        else:
            sizes = [len(res.point_loss[i]) for i in ia]
            x = np.concatenate([np.asarray(exact.point_loss[j], float) for j in ir])
            y = np.concatenate([np.asarray(res.point_loss[i], float) for i in ia])
            bad = np.repeat(bad, sizes)
        ok = ~bad
        ax.scatter(x[ok], y[ok], s=14, alpha=0.75, color="tab:blue",
                   label=f"reliable folds ({int(ok.sum())})" if kind == "fold"
                   else f"units of reliable folds ({int(ok.sum())})")
        if bad.any():
            ax.scatter(x[bad], y[bad], label=f"unreliable folds ({int(bad.sum())})"
                       if kind == "fold" else f"units of unreliable folds ({int(bad.sum())})",
                       **_BAD)
        both = np.concatenate([x, y])
        both = both[np.isfinite(both)]
        if both.size:
            lo, hi = float(both.min()), float(both.max())
            ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="y = x")
        ref = "exact CV" if exact.method == "exact" else str(exact.method).upper()
        ax.set_xlabel(f"{ref} {kind} loss")
        ax.set_ylabel(f"{method} {kind} loss")
        ax.set_title(title or f"{method} against {ref}, per {kind}")
    else:
        if kind == "fold":
            x = np.arange(len(res.fold_loss), dtype=float)
            y = np.asarray(res.fold_loss, float)
            ax.set_xlabel("fold (position in res.folds)")
        else:
            units = _units(res)
            sizes = [len(u) for u in units]
            x = np.concatenate(units).astype(float)
            y = np.concatenate([np.asarray(p, float) for p in res.point_loss])
            bad = np.repeat(bad, sizes)
            order = np.argsort(x, kind="stable")
            x, y, bad = x[order], y[order], bad[order]
            ax.set_xlabel("left-out unit")
        ax.plot(x, y, ".-", lw=0.8, ms=4, color="tab:blue", label=f"{kind} loss")
        if bad.any():
            ax.scatter(x[bad], y[bad], **_BAD,
                       label=f"unreliable folds ({int(np.sum(res.unreliable))})")
        ax.set_ylabel(f"{kind} loss, -log p (lower is better)")
        ax.set_title(title or f"{method} held-out loss per {kind}")
    ax.legend(loc="best", fontsize="small")
    return ax
