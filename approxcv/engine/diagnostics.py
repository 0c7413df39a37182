"""Diagnostics of the supplied fit: is it a stationary point, is H well conditioned."""
from __future__ import annotations

import warnings

import numpy as np

from ..errors import InexactFitWarning
from .linalg import HessianFactor, solve

#: relative Newton-step size above which the fit is reported as inexact
INEXACT_FIT_RTOL = 1e-4


def fit_diagnostics(grad, factor: HessianFactor, u_full, warn: bool = True) -> dict:
    """Summarise the fit at ``u_1``.

    ``newton_step_norm = ||H^{-1} g||`` measures how far ``u_1`` is from the stationary
    point; when it exceeds ``1e-4 (1 + ||u_1||)`` an :class:`InexactFitWarning` is raised
    with the numbers (the IJ still applies at an inexact fit, but the user should know).

    Returns:
        dict with ``grad_norm``, ``newton_step_norm``, ``hessian_min_eig``,
        ``hessian_max_eig``, ``jitter``, ``condition_number``, ``inexact_fit``.
    """
    grad = np.asarray(grad)
    grad_norm = float(np.linalg.norm(grad))
    step_norm = float(np.linalg.norm(np.asarray(solve(factor, grad))))
    inexact = step_norm > INEXACT_FIT_RTOL * (1.0 + float(np.linalg.norm(np.asarray(u_full))))
    if inexact and warn:
        warnings.warn(
            f"the supplied parameters are not a stationary point: gradient norm {grad_norm:.3g}, "
            f"Newton step to the optimum {step_norm:.3g}; approximate CV is taken around "
            f"this inexact fit", InexactFitWarning, stacklevel=3)
    return {"grad_norm": grad_norm, "newton_step_norm": step_norm,
            "hessian_min_eig": factor.min_eig, "hessian_max_eig": factor.max_eig,
            "jitter": factor.jitter, "condition_number": factor.condition_number,
            "inexact_fit": bool(inexact)}
