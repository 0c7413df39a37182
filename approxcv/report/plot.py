"""Figures: approximate vs exact scatter with the x = y line, timing bars and a model
comparison (matplotlib). The scatter and the comparison are :mod:`approxcv.plot`'s figures
(``CVResult.plot``, ``acv.plot.compare``) with the report's titles and an optional file."""
from __future__ import annotations

import numpy as np
from matplotlib.figure import Figure

from .. import plot as acv_plot
from .._validate import check_choice
from ..results import accuracy

__all__ = ["scatter", "timing_bars", "compare", "figure_axes"]


def figure_axes(figsize: tuple):
    """``(figure, axes)`` of a new :class:`matplotlib.figure.Figure`, outside pyplot: the
    report's figures are drawn and saved without a backend or pyplot's list of open
    figures, so writing a report changes nothing in the user's matplotlib session."""
    fig = Figure(figsize=figsize)
    return fig, fig.subplots()


def scatter(approx, exact, kind: str = "point", ax=None, path=None, title: str | None = None):
    """Scatter approximate against exact held-out losses (``kind`` ``"point"`` or ``"fold"``)
    on the folds both results share, with the ``x = y`` line and the unreliable folds marked:
    :meth:`CVResult.plot(exact=...) <approxcv.results.CVResult.plot>`, titled with the mean
    relative error of :func:`~approxcv.accuracy`. Saves to ``path`` if given."""
    check_choice("kind", kind, ("point", "fold"))
    df = accuracy(approx, exact)
    fig = None
    if ax is None:
        fig, ax = figure_axes((4.5, 4.5))
    approx.plot(ax=ax, exact=exact, kind=kind, title=title or (
        f"{approx.method.upper()} vs exact CV "
        f"(mean rel. error {df.attrs[f'mean_rel_error_{kind}']:.2e})"))
    if path is not None:
        (fig or ax.figure).tight_layout()
        (fig or ax.figure).savefig(path, dpi=120)
    return ax


def timing_bars(seconds: dict, folds: dict | None = None, ax=None, path=None,
                title: str = "time after the fit", log: bool = False):
    """Horizontal bars of ``{label: seconds}`` (labels beside the bars, never overlapping),
    each annotated with its seconds and, where ``folds`` gives ``{label: number of folds}``,
    the folds it covered and the seconds per fold: a total over 1,000 approximate folds and
    one over 10 exact refits are different amounts of work, and the annotation says so.
    Linear axis by default (a log axis shrinks the gap it is drawn to show). Saves to
    ``path`` if given."""
    fig = None
    labels = list(seconds)
    if ax is None:
        fig, ax = figure_axes((7, 1.2 + 0.55 * len(labels)))
    y = np.arange(len(labels))[::-1]
    values = [seconds[k] for k in labels]
    ax.barh(y, values, color="tab:blue", height=0.6)
    ax.set_yticks(y, labels)
    if log:
        ax.set_xscale("log")
    ax.set_xlabel("seconds" + (" (log scale)" if log else ""))
    ax.set_title(title)
    for yi, k, v in zip(y, labels, values):
        note = f" {v:.3g} s"
        n = (folds or {}).get(k)
        if n:
            note += f", {n} folds, {v / n:.3g} s per fold"
        ax.annotate(note, (v, yi), va="center", ha="left", fontsize=8)
    ax.set_xlim(right=max(values) * (8 if log else 1.9) if values and max(values) > 0
                else None)
    if path is not None:
        (fig or ax.figure).tight_layout()
        (fig or ax.figure).savefig(path, dpi=120)
    return ax


def compare(table, ax=None, path=None, title: str | None = None):
    """Plot a :func:`~approxcv.compare` table in ArviZ's layout, :func:`approxcv.plot.compare`
    (best on top; dots ``± se``, grey triangles: the difference to the best ``± dse``; a
    dashed line at the best ``elpd``; rows with ``warning`` in red). Saves to ``path`` if
    given."""
    if ax is None:
        ax = figure_axes((6, 0.6 * len(table) + 1.4))[1]
    ax = acv_plot.compare(table, ax=ax, title=title or (
        "model comparison (± se; triangles: ± se of the difference)"))
    if path is not None:
        ax.figure.tight_layout()
        ax.figure.savefig(path, dpi=120)
    return ax
