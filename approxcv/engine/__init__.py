"""Model-agnostic engine: derivatives of F(theta, w), IJ, Newton step, exact refits, diagnostics.

Every function here works on a flat objective ``f(u, w)`` over an unconstrained parameter
vector ``u`` (``D``) and unit weights ``w`` (``n``); see :class:`WeightedObjective`.
"""
from . import accumulate, aloo, exact, matrix_free  # noqa: F401  (submodules)
from .accumulate import structure_derivatives
from .derivatives import cross_jacobian, gradient, gradient_hessian_jacobian, hessian
from .diagnostics import cg_diagnostics, fit_diagnostics
from .exact import exact_params
from .ij import ij_params
from .matrix_free import (CGResult, block_conjugate_gradient, conjugate_gradient,
                          ij_params_cg, newton_params_cg)
from .linalg import MAX_DENSE_DIM, HessianFactor, factor_hessian, solve
from .newton import newton_params
from .objective import WeightedObjective, make_objective
from .optimize import MinimizeResult, batched_minimize, minimize

__all__ = ["cross_jacobian", "gradient", "hessian", "fit_diagnostics", "exact_params",
           "ij_params", "HessianFactor", "factor_hessian", "solve", "newton_params",
           "WeightedObjective", "make_objective", "MinimizeResult", "minimize",
           "batched_minimize", "gradient_hessian_jacobian", "structure_derivatives",
           "cg_diagnostics", "CGResult", "block_conjugate_gradient", "conjugate_gradient",
           "ij_params_cg", "newton_params_cg", "MAX_DENSE_DIM"]
