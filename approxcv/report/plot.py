"""Figures: approximate vs exact scatter with the x = y line, timing bars and a model
comparison (matplotlib). The scatter and the comparison are :mod:`approxcv.plot`'s figures
(``CVResult.plot``, ``acv.plot.compare``) with the report's titles and an optional file."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg", force=False)
import matplotlib.pyplot as plt  # noqa: E402

from .. import plot as acv_plot  # noqa: E402
from .._validate import check_choice  # noqa: E402
from ..results import accuracy  # noqa: E402

__all__ = ["scatter", "timing_bars", "compare"]


def scatter(approx, exact, kind: str = "point", ax=None, path=None, title: str | None = None):
    """Scatter approximate against exact held-out losses (``kind`` ``"point"`` or ``"fold"``)
    on the folds both results share, with the ``x = y`` line and the unreliable folds marked:
    :meth:`CVResult.plot(exact=...) <approxcv.results.CVResult.plot>`, titled with the mean
    relative error of :func:`~approxcv.accuracy`. Saves to ``path`` if given."""
    check_choice("kind", kind, ("point", "fold"))
    df = accuracy(approx, exact)
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(4.5, 4.5))
    approx.plot(ax=ax, exact=exact, kind=kind, title=title or (
        f"{approx.method.upper()} vs exact CV "
        f"(mean rel. error {df.attrs[f'mean_rel_error_{kind}']:.2e})"))
    if path is not None:
        (fig or ax.figure).tight_layout()
        (fig or ax.figure).savefig(path, dpi=120)
    return ax


def timing_bars(seconds: dict, ax=None, path=None, title: str = "time after the fit",
                log: bool = True):
    """Bar chart of ``{label: seconds}``; log scale by default. Saves to ``path`` if given."""
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(5, 3.5))
    labels = list(seconds)
    ax.bar(labels, [seconds[k] for k in labels], color="tab:blue")
    if log:
        ax.set_yscale("log")
    ax.set_ylabel("seconds")
    ax.set_title(title)
    for i, k in enumerate(labels):
        ax.annotate(f"{seconds[k]:.3g}s", (i, seconds[k]), ha="center", va="bottom", fontsize=8)
    if path is not None:
        (fig or ax.figure).tight_layout()
        (fig or ax.figure).savefig(path, dpi=120)
    return ax


def compare(table, ax=None, path=None, title: str | None = None):
    """Plot a :func:`~approxcv.compare` table in ArviZ's layout, :func:`approxcv.plot.compare`
    (best on top; dots ``± se``, grey triangles: the difference to the best ``± dse``; a
    dashed line at the best ``elpd``; rows with ``warning`` in red). Saves to ``path`` if
    given."""
    ax = acv_plot.compare(table, ax=ax, title=title or (
        "model comparison (± se; triangles: ± se of the difference)"))
    if path is not None:
        ax.figure.tight_layout()
        ax.figure.savefig(path, dpi=120)
    return ax
