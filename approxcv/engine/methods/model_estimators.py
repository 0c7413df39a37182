"""A model's own estimators as registered methods: ``"la"``, ``"ep"``, ``"q"``, ``"tq"``,
``"waic_g"``, ``"waic_v"``, ``"is"`` (the Bayesian leave-one-out estimators of a Gaussian
latent model, ``docs/bayes.md``).

A model that computes its cross-validation itself declares
``own_estimators(params, data) -> {name: fn(folds, options) -> (fold_loss, points,
diagnostics)}`` (:class:`~approxcv.models.base.Model`); :func:`approxcv.problem.make_problem`
turns it into ``problem.estimators``. The methods registered here call the model's function
of their name; ``"ij"``, ``"ns"``, ``"exact"`` and ``"auto"`` consult
:func:`model_estimator` first and defer to the model when it has one. The parameters of
every fold are the full-data ones (the model holds its hyperparameters fixed), and the
held-out losses are the model's (``diagnostics["heldout"]``).
"""
from __future__ import annotations

import time

import numpy as np

from ...errors import InvalidArgumentError, UnsupportedMethodError
from ..registry import register_method

__all__ = ["model_estimator", "run_model_estimator", "MODEL_METHODS"]

#: the methods registered here: estimators only a model can supply
MODEL_METHODS = ("la", "ep", "q", "tq", "waic_g", "waic_v", "is")


def model_estimator(problem, name: str):
    """The model's own estimator ``name``, or ``None`` when the model has none at all (the
    engine's methods apply).

    Raises:
        UnsupportedMethodError: the model has its own estimators but not ``name``.
    """
    own = getattr(problem, "estimators", None)
    if own is None:
        return None
    if name not in own:
        model = problem.key[0] if problem.key else "this model"
        raise UnsupportedMethodError(
            f"{model!r} does not support method={name!r}; its methods are {sorted(own)}")
    return own[name]


def run_model_estimator(problem, folds, options, name: str):
    """``(fold_params (F, D), diagnostics)`` of the model's estimator ``name``: the full
    fit's parameters on every fold, the held-out losses in ``diagnostics["heldout"]``, the
    estimator's wall time in ``diagnostics["stage_seconds"]["estimator"]`` (its held-out
    losses and error estimate are one computation of the model; stages the model times
    itself, ``diagnostics["stage_seconds"]`` of its own, are kept beside it)."""
    t = time.perf_counter()
    fold_loss, points, diagnostics = model_estimator(problem, name)(folds, options)
    seconds = time.perf_counter() - t
    u = np.asarray(problem.u_full)
    params = np.ascontiguousarray(np.broadcast_to(u, (len(folds), u.shape[0])))
    diagnostics = dict(diagnostics)
    diagnostics["heldout"] = (np.asarray(fold_loss, float), np.asarray(points, float))
    diagnostics["stage_seconds"] = {**dict(diagnostics.get("stage_seconds", {})),
                                    "estimator": seconds}
    return params, diagnostics


def _registered(name: str):
    def method(problem, folds, options):
        if getattr(problem, "estimators", None) is None:
            raise UnsupportedMethodError(
                f"method={name!r} is an estimator a model supplies itself (the Bayesian "
                f"leave-one-out estimators of acv.models.GP); {problem.key[0]!r} has none: "
                "use 'ij', 'ns', 'exact' or 'auto'")
        if options.executor is not None:
            raise InvalidArgumentError(
                f"`executor` distributes refits and derivative sweeps; method={name!r} is "
                "the model's own estimator from its one fit and runs none (use "
                "method='exact' or 'auto' to refit folds on the executor, or drop "
                "`executor`)")
        return run_model_estimator(problem, folds, options, name)
    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"The model's own estimator {name!r} (module docstring)."
    return method


for _name in MODEL_METHODS:
    register_method(_name, _registered(_name), local=False, refits=False)
