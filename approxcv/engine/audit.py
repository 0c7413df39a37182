"""``audit=k``: exact refits of ``k`` random folds measure an approximate method's error.

The measured relative errors ``|L_o(method) - L_o(exact)| / |L_o(exact)|`` of the audited
folds estimate the method's mean relative error over all folds (the folds are a simple
random sample), reported with a 95 % Student-t confidence interval. Audited folds whose
exact refit is itself unreliable are left out of the figures and counted.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from .diagnostics import unreliable_causes
from .heldout import heldout_losses
from .registry import get_method

__all__ = ["audit_folds", "refit_problem", "AUDIT_SEED"]

#: seed of the audit's fold sample (fixed, so an audit is reproducible)
AUDIT_SEED = 0


def refit_problem(problem):
    """The problem exact refits use: ``problem.for_refits()`` where the engine was given a
    smooth local surrogate or a problem without starts, else ``problem`` itself."""
    return problem if problem.for_refits is None else problem.for_refits()


def audit_folds(problem, folds, fold_loss, options) -> dict:
    """Refit ``options.audit`` random folds exactly and compare with ``fold_loss``.

    Returns:
        dict: ``folds`` (audited fold ids), ``rel_error`` (per audited fold, NaN where the
        exact refit is unreliable), ``mean_rel_error``, ``ci95`` (``(low, high)``),
        ``max_rel_error``, ``n`` (folds used), ``n_unreliable_exact``.
    """
    k = min(int(options.audit), len(folds))
    pick = np.sort(np.random.default_rng(AUDIT_SEED).choice(len(folds), k, replace=False))
    target = refit_problem(problem)
    sub = folds.subset(pick)
    quiet = dataclasses.replace(options, warn=False, progress=False)
    params, diag = get_method("exact")[0](target, sub, quiet)
    exact_loss, _ = heldout_losses(target, np.asarray(params), sub.padded(), options.batch_size,
                                   unscored=sub.unscored_padded())
    bad = np.zeros(k, bool)
    for mask in unreliable_causes(diag.get("unreliable"), k).values():
        bad |= mask
    bad |= ~np.isfinite(exact_loss)
    with np.errstate(divide="ignore", invalid="ignore"):
        rel = np.abs(np.asarray(fold_loss)[pick] - exact_loss) / np.abs(exact_loss)
    rel = np.where(bad, np.nan, rel)
    used = rel[~bad]
    mean = float(np.mean(used)) if used.size else np.nan
    if used.size > 1:
        import scipy.special        # here, not at the top: 0.04 s of every fresh process
        half = float(scipy.special.stdtrit(used.size - 1, 0.975) * np.std(used, ddof=1)
                     / np.sqrt(used.size))
        ci = (max(mean - half, 0.0), mean + half)
    else:
        ci = (np.nan, np.nan)
    return {"folds": sub.ids, "rel_error": rel, "exact_fold_loss": exact_loss,
            "mean_rel_error": mean, "ci95": ci,
            "max_rel_error": float(np.max(used)) if used.size else np.nan,
            "n": int(used.size), "n_unreliable_exact": int(bad.sum())}
