"""Model-declared per-fold checks (``Problem.fold_check``) in every method's diagnostics.

Some approximations rest on an assumption a fold can break: the elastic net's IJ and NS
work on the support of the full fit, which leaving data out may change. The model states
the check (:meth:`~approxcv.models.base.Model.fold_check`), :func:`make_problem` binds it
to the fit and the data, and :func:`with_fold_check` runs it on every method's fold
parameters, so ``ij``, ``ns`` and ``exact`` report it alike.
"""
from __future__ import annotations

import functools

import numpy as np

from .diagnostics import unreliable_causes

__all__ = ["with_fold_check"]


def with_fold_check(method, exact: bool = False):
    """``method(problem, folds, options)`` that also reports ``problem.fold_check``.

    Each check ``name`` becomes ``diagnostics[name]`` (``(n_folds,)`` bool) and
    ``diagnostics[name + "_folds"]`` (their fold ids). Approximate methods let the model
    warn and list the folds as unreliable (cause ``name``, e.g. ``"support_change"``); for
    exact refits (``exact=True``) a change is the truth, not an error of the approximation,
    so it is only recorded.
    """
    @functools.wraps(method)
    def checked(problem, folds, options):
        params, diagnostics = method(problem, folds, options)
        if problem.fold_check is not None:
            found = problem.fold_check(params, folds.padded(), options.warn and not exact)
            for name, mask in found.items():
                mask = np.asarray(mask, bool)
                diagnostics[name] = mask
                diagnostics[f"{name}_folds"] = folds.ids[mask]
                if not exact:       # an assumption of the approximation broken: unreliable
                    causes = unreliable_causes(diagnostics.get("unreliable"), len(folds))
                    causes[name] = causes.get(name, np.zeros(len(folds), bool)) | mask
                    diagnostics["unreliable"] = causes
        return params, diagnostics
    return checked
