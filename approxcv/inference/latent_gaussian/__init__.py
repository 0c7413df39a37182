"""The kernel layer of Gaussian latent models (Vehtari, Mononen, Tolvanen, Sivula &
Winther: "Bayesian LOO cross-validation approximations for Gaussian latent variable
models"; ``shared/papers/bayesian_loo_gaussian_latent_models.txt``): pure functions on
arrays. The model is :class:`approxcv.models.GP`, cross-validated through
``approxcv.cross_validate`` like every other (``docs/bayes.md``)::

    model = approxcv.models.GP(likelihood="probit", inference="laplace")
    res = approxcv.cross_validate(model, (X, y), approxcv.folds.kfold(len(y), 5), "la")

Modules, data flowing down: ``likelihoods`` and ``covariance`` (the model), ``quadrature``
(tilted moments), ``laplace`` and ``ep`` (posterior approximations), ``posterior`` (one
record for both), ``hyper`` (type-II MAP, CCD), ``estimators`` (leave-one-out estimators at
one hyperparameter point), ``cavities`` (leave-a-set-out block cavities), ``importance``
(over hyperparameter points, PSIS). The refits of exact CV, which run through the executor
and checkpoints, are the model's: :mod:`approxcv.models.gp.refits`.
"""
from . import likelihoods

__all__ = ["likelihoods"]
