"""The one optimiser package: quasi-Newton (BFGS / L-BFGS with a gradient stop and a Newton
polish), one damped Newton, and one positive-definiteness policy with recorded jitter.

Model fits, exact-CV refits, Newton steps, ERM and tuning all use these; nothing else in
approxcv minimises or factors a Hessian.
"""
from .newton import batched_newton_minimize, newton_minimize
from .pd import (MAX_DENSE_DIM, NEGLIGIBLE_JITTER, HessianFactor, factor_hessian,
                 jittered_cholesky, solve)
from .quasi_newton import MinimizeResult, batched_minimize, minimize, single_start

__all__ = ["minimize", "batched_minimize", "single_start", "newton_minimize",
           "batched_newton_minimize", "MinimizeResult", "HessianFactor", "factor_hessian",
           "jittered_cholesky", "solve", "MAX_DENSE_DIM", "NEGLIGIBLE_JITTER"]
