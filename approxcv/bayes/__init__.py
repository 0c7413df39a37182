"""Bayesian leave-one-out for Gaussian latent models (Vehtari, Mononen, Tolvanen, Sivula &
Winther: "Bayesian LOO cross-validation approximations for Gaussian latent variable
models"; ``shared/papers/bayesian_loo_gaussian_latent_models.txt``).

    fitted = approxcv.bayes.GP(likelihood="probit").fit(X, y, inference="laplace")
    res = approxcv.bayes.loo(fitted, method="la")   # "exact" "la" "ep" "q" "tq"
    res.elpd, res.se, res.pointwise, res.to_arviz() # "waic_g" "waic_v" "is" "brute"

Modules, data flowing down: ``likelihoods`` and ``covariance`` (the model), ``quadrature``
(tilted moments), ``laplace`` and ``ep`` (posterior approximations), ``posterior`` (one
record for both), ``hyper`` (type-II MAP, CCD), ``gp`` (the user-facing model and fit),
``estimators`` (LOO at one hyperparameter point), ``importance`` (over points, PSIS),
``brute`` (refits), ``loo`` (dispatch), ``result``.
"""
from . import likelihoods
from .gp import GP, FittedGP
from .loo import METHODS, loo
from .result import BayesLOOResult

__all__ = ["GP", "FittedGP", "loo", "METHODS", "BayesLOOResult", "likelihoods"]
