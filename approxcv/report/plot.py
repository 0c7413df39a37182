"""Figures: approximate vs exact scatter with the x = y line, timing bars and a model
comparison (matplotlib)."""
from __future__ import annotations

import matplotlib

matplotlib.use("Agg", force=False)
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

from .._validate import check_choice  # noqa: E402
from ..results import accuracy  # noqa: E402

__all__ = ["scatter", "timing_bars", "compare"]


def scatter(approx, exact, kind: str = "point", ax=None, path=None, title: str | None = None):
    """Scatter approximate against exact held-out losses (``kind`` ``"point"`` or ``"fold"``)
    on the folds both results share, with the ``x = y`` line. Saves to ``path`` if given."""
    check_choice("kind", kind, ("point", "fold"))
    df = accuracy(approx, exact)
    df = df[df.kind == kind]
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(4.5, 4.5))
    ax.scatter(df["exact"], df["approx"], s=12, alpha=0.7, label=approx.method.upper())
    lo = float(np.nanmin(df[["exact", "approx"]].to_numpy()))
    hi = float(np.nanmax(df[["exact", "approx"]].to_numpy()))
    ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="x = y")
    ax.set_xlabel(f"exact CV {kind} loss")
    ax.set_ylabel(f"{approx.method.upper()} {kind} loss")
    ax.set_title(title or f"{approx.method.upper()} vs exact CV "
                 f"(mean rel. error {df['rel_error'].mean():.2e})")
    ax.legend(loc="upper left")
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
    """Plot a :func:`~approxcv.compare` table in ArviZ's layout: one row per model,
    best on top; a filled dot at its ``elpd`` with a ``± se`` bar, and for every other model
    a grey triangle at ``elpd`` with the paired ``± dse`` bar of its difference to the best
    (the bar that decides whether the difference is real); a dashed line at the best
    ``elpd``. Rows with ``warning`` are drawn in red. Saves to ``path`` if given."""
    fig = None
    if ax is None:
        fig, ax = plt.subplots(figsize=(6, 0.6 * len(table) + 1.4))
    y = -np.arange(len(table), dtype=float)
    colours = ["tab:red" if w else "k" for w in table["warning"]]
    for yi, (_, row), c in zip(y, table.iterrows(), colours):
        ax.errorbar(row["elpd"], yi, xerr=row["se"], fmt="o", color=c, capsize=3)
        if row["rank"] > 0:
            ax.errorbar(row["elpd"], yi - 0.25, xerr=row["dse"], fmt="^", color="0.5",
                        capsize=3)
    ax.axvline(table["elpd"].iloc[0], ls="--", color="0.6", lw=1)
    ax.set_yticks(y)
    ax.set_yticklabels([str(i) for i in table.index])
    unit = table.attrs.get("unit", "point")
    ax.set_xlabel("elpd (sum over left-out units)" if unit == "point"
                  else "elpd per fold (mean over folds)")
    ax.set_title(title or "model comparison (± se; triangles: ± se of the difference)")
    if path is not None:
        (fig or ax.figure).tight_layout()
        (fig or ax.figure).savefig(path, dpi=120)
    return ax
