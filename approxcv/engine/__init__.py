"""Model-agnostic engine: derivatives of F(theta, w), CV methods, held-out evaluation, diagnostics.

The engine sees only :class:`~approxcv.problem.Problem`\\ s (a flat objective ``f(u, w, data)``
over an unconstrained parameter vector ``u`` of size ``D`` and unit weights ``w`` of size
``n``) and arrays; methods live in :mod:`approxcv.engine.methods`, one module each.
"""
from . import accumulate, aloo, batching, checkpoint, matrix_free, methods  # noqa: F401
from .accumulate import structure_derivatives
from .batching import fold_weights
from .heldout import heldout_losses
from .derivatives import (cross_jacobian, full_derivatives, gradient,
                          gradient_hessian_jacobian, hessian)
from .diagnostics import cg_diagnostics, fit_diagnostics
from .matrix_free import (CGResult, block_conjugate_gradient, conjugate_gradient,
                          ij_params_cg, newton_params_cg)
from .options import Options
from .registry import available_methods, get_method, register_method
from ..optim.pd import MAX_DENSE_DIM

__all__ = ["cross_jacobian", "gradient", "hessian", "gradient_hessian_jacobian",
           "full_derivatives", "structure_derivatives", "fit_diagnostics", "cg_diagnostics",
           "CGResult", "block_conjugate_gradient", "conjugate_gradient", "ij_params_cg",
           "newton_params_cg", "fold_weights", "heldout_losses", "Options", "register_method",
           "get_method", "available_methods", "MAX_DENSE_DIM"]
