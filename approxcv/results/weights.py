"""Model weights from pointwise expected log predictive densities, as
``arviz_stats.compare`` computes its ``weight`` column (arviz-stats 0.8): stacking of
predictive distributions, pseudo-BMA+ (Akaike-type weights stabilised by the Bayesian
bootstrap, arviz's ``"BB-pseudo-BMA"``) and pseudo-BMA. arviz-stats computes them inside
``compare`` only (no public function takes plain arrays), so the same algorithms are here,
on arrays; ``tests/results/test_weights.py`` checks them against ``arviz_stats.compare``.

Each takes ``elpd_i`` of shape ``(n_units, n_models)``: ``elpd_i[i, k] = log p(y_i | y_-i)``
under model ``k`` (Yao, Vehtari, Simpson and Gelman, *Using stacking to average Bayesian
predictive distributions*, Bayesian Analysis 13(3), 2018).
"""
from __future__ import annotations

import numpy as np

from ..errors import InvalidArgumentError

__all__ = ["stacking_weights", "pseudo_bma_weights", "pseudo_bma_plus_weights",
           "model_weights", "WEIGHT_METHODS", "BOOTSTRAP_DRAWS", "BOOTSTRAP_SEED"]

#: the Bayesian bootstrap of pseudo-BMA+: arviz-stats' number of draws and its seed
BOOTSTRAP_DRAWS = 1000
BOOTSTRAP_SEED = 124

#: accepted names (lower case) -> the method's name in approxcv (arviz's in the comment)
WEIGHT_METHODS = {"stacking": "stacking",           # "stacking"
                  "pseudo-bma+": "pseudo-bma+",     # "BB-pseudo-BMA"
                  "bb-pseudo-bma": "pseudo-bma+",
                  "pseudo-bma": "pseudo-bma"}       # "pseudo-BMA"


def _matrix(elpd_i) -> np.ndarray:
    e = np.asarray(elpd_i, float)
    if e.ndim != 2 or e.shape[0] < 1 or e.shape[1] < 1:
        raise InvalidArgumentError(f"`elpd_i` must be a (n_units, n_models) array, got shape "
                                   f"{e.shape}")
    if not np.isfinite(e).all():
        raise InvalidArgumentError(f"`elpd_i` holds {int((~np.isfinite(e)).sum())} NaN or "
                                   "infinite value(s): model weights need a finite log "
                                   "predictive density of every unit under every model")
    return e


def stacking_weights(elpd_i) -> np.ndarray:
    """Stacking weights: ``w`` on the simplex maximising ``sum_i log sum_k w_k
    exp(elpd_i[i, k])``, by SciPy's SLSQP from ``w = 1/K`` with bounds ``0 <= w_k <= 1`` and
    the constraint ``sum_k w_k = 1`` (as ``arviz_stats.compare(method="stacking")``, with its
    default tolerances). Each row is shifted by its largest value before ``exp``, which
    changes the objective by a constant and its gradient not at all (arviz exponentiates
    unshifted values, which underflow below about -745 nats per unit). The optimum is
    clipped to ``[0, 1]`` and renormalised (SLSQP may end a rounding error outside)."""
    e = _matrix(elpd_i)
    k = e.shape[1]
    if k == 1:
        return np.ones(1)
    from scipy.optimize import Bounds, LinearConstraint, minimize  # SciPy: only when asked
    dens = np.exp(e - e.max(axis=1, keepdims=True))

    def minus_log_score(w):
        return -np.sum(np.log(dens @ w))

    def gradient(w):
        return -np.sum(dens / (dens @ w)[:, None], axis=0)

    out = minimize(minus_log_score, np.full(k, 1.0 / k), jac=gradient, method="SLSQP",
                   bounds=Bounds(np.zeros(k), np.ones(k)),
                   constraints=LinearConstraint(np.ones(k), lb=1.0, ub=1.0))
    w = np.clip(out.x, 0.0, 1.0)
    return w / w.sum()


def pseudo_bma_weights(elpd_i) -> np.ndarray:
    """Pseudo-BMA weights ``w_k ∝ exp(elpd_k)``, ``elpd_k = sum_i elpd_i[i, k]`` (Akaike-type
    weights, no bootstrap: ``arviz_stats.compare(method="pseudo-BMA")``)."""
    total = _matrix(elpd_i).sum(axis=0)
    z = np.exp(total - total.max())
    return z / z.sum()


def pseudo_bma_plus_weights(elpd_i, seed: int = BOOTSTRAP_SEED,
                            draws: int = BOOTSTRAP_DRAWS) -> np.ndarray:
    """Pseudo-BMA+ weights: pseudo-BMA weights averaged over ``draws`` Bayesian-bootstrap
    replicates ``z_bk = n sum_i b_i elpd_i[i, k]``, ``b ~ Dirichlet(1, ..., 1)`` drawn by
    ``numpy.random.RandomState(seed)`` (what ``scipy.stats.dirichlet.rvs(..., random_state=
    seed)`` draws; ``arviz_stats.compare(method="BB-pseudo-BMA")`` uses seed 124 and 1000
    draws, the defaults here)."""
    e = _matrix(elpd_i)
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or seed < 0:
        raise InvalidArgumentError(f"`seed` must be a non-negative integer, got {seed!r}")
    if isinstance(draws, bool) or not isinstance(draws, (int, np.integer)) or draws < 1:
        raise InvalidArgumentError(f"`draws` must be a positive integer, got {draws!r}")
    n = e.shape[0]
    b = np.random.RandomState(int(seed)).dirichlet(np.ones(n), size=int(draws))
    z = b @ (e * n)
    w = np.exp(z - z.max(axis=1, keepdims=True))
    return (w / w.sum(axis=1, keepdims=True)).mean(axis=0)


def model_weights(method: str, elpd_i, seed: int = BOOTSTRAP_SEED) -> np.ndarray:
    """The weights of ``method`` (a name of :data:`WEIGHT_METHODS`, any case)."""
    name = WEIGHT_METHODS.get(str(method).lower()) if isinstance(method, str) else None
    if name is None:
        raise InvalidArgumentError(
            f"`weights` must be one of 'stacking', 'pseudo-bma+', 'pseudo-bma' or None, got "
            f"{method!r}")
    if name == "stacking":
        return stacking_weights(elpd_i)
    if name == "pseudo-bma":
        return pseudo_bma_weights(elpd_i)
    return pseudo_bma_plus_weights(elpd_i, seed)
