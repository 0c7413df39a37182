"""The maximum SCL estimator: :func:`fit` returns an :class:`SCLFit` with the estimate, a
protocol model for cross-validation, the sandwich variance, the cost and the relative
efficiency (seed §3-4, §7)."""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .components import check_component_model, full_likelihood
from .cost import expected_cost, realised_cost
from .model import SCLModel, SCLParams
from .policy import Policy
from .variance import asymptotic_variance, checked_inverse, sandwich
from .beta import heuristic_beta

__all__ = ["fit", "SCLFit"]


@dataclass
class SCLFit:
    """Result of :func:`fit`.

    params: :class:`~approxcv.composite.SCLParams` (``.theta``, the flat estimate);
    model: the :class:`~approxcv.composite.SCLModel` (a protocol model:
    ``approxcv.cross_validate(fit.model, X, folds, params=fit.params)``); data: its prepared
    data (samples and realised coefficients); seconds: wall time of the fit;
    beta_history: the weights tried by the beta heuristic (empty without it);
    :attr:`converged`: whether the fit converged. Cross-validating it gives the package's
    one result type, a :class:`~approxcv.results.CVResult` (pass the samples ``X``, not
    ``data``: the result then records the digest of ``X``, the same for every policy, and
    :func:`approxcv.compare` ranks fits of different policies side by side), and
    :func:`~approxcv.composite.select_policy` ranks policies in a
    :class:`~approxcv.selection.Selection`, as :func:`approxcv.select` ranks models.
    """
    params: SCLParams
    model: SCLModel
    data: Any
    seconds: float
    beta_history: list = field(default_factory=list)

    @property
    def theta(self) -> np.ndarray:
        return np.asarray(self.params.theta)

    @property
    def converged(self) -> bool:
        """``False`` where the (last) fit stopped before its criterion or the data do not
        bound some parameters (``SCLModel.fit``'s ``fit_result_``)."""
        return bool((self.model.fit_result_ or {}).get("converged", True))

    @property
    def n(self) -> int:
        return int(self.data.coef.shape[0])

    def variance(self, form: str = "corrected") -> np.ndarray:
        """Estimated covariance ``(D, D)`` of the estimate, the sandwich ``Upsilon Sigma
        Upsilon / n`` (its diagonal: squared standard errors); ``form="paper"`` uses the
        printed eq. 17, which omits the selection noise
        (:func:`approxcv.composite.variance.sandwich`)."""
        return sandwich(self.model, self.data, self.params, form)["variance"]

    def standard_errors(self, form: str = "corrected") -> np.ndarray:
        return np.sqrt(np.diag(self.variance(form)))

    def asymptotic_variance(self, theta0=None, form: str = "corrected") -> np.ndarray:
        """Exact ``Upsilon Sigma Upsilon`` at ``theta0`` (default: the estimate) by
        enumeration (:func:`approxcv.composite.variance.asymptotic_variance`)."""
        theta0 = self.theta if theta0 is None else theta0
        return asymptotic_variance(self.model.base, self.model.policy, theta0, form)

    @property
    def expected_cost(self) -> float:
        """Expected FLOPs of the SCL value and gradient, ``n sum_j lambda_j c_j``
        (:mod:`approxcv.composite.cost`)."""
        return expected_cost(self.model.base, self.model.policy, self.n, self.data.samples)

    @property
    def realised_cost(self) -> float:
        """FLOPs of the value and gradient at the realised draws, ``sum_ij Z_ij c_j``."""
        return realised_cost(self.model.base, self.model.policy,
                             self.model.selections(self.n), self.data.samples)

    def mle_variance(self) -> np.ndarray:
        """The MLE's estimated covariance at the estimate: the inverse Hessian of the full
        negative log-likelihood (inverse observed Fisher information), ``(D, D)``."""
        fl = SCLModel(self.model.base, Policy([full_likelihood(self.model.base)]),
                      prior_var=self.model.prior_var)
        data = fl.prepare(self.data.samples)[0]
        return checked_inverse(sandwich(fl, data, self.params)["hessian"],
                               "the Hessian of the full negative log-likelihood")

    def relative_efficiency(self, form: str = "corrected", exact: bool = False) -> dict:
        """Size of the variance relative to the MLE's (seed eq. 12): ``{"det": det V /
        det V_mle, "trace": tr V / tr V_mle}`` (both >= 1 asymptotically). ``exact``: the
        enumerated asymptotic variances at the estimate instead of the sandwich and the
        inverse observed information."""
        if exact:
            v = self.asymptotic_variance(form=form)
            v0 = asymptotic_variance(self.model.base, Policy([full_likelihood(
                self.model.base)]), self.theta)
        else:
            v, v0 = self.variance(form), self.mle_variance()
        sign, logdet = np.linalg.slogdet(v)
        sign0, logdet0 = np.linalg.slogdet(v0)
        return {"det": float(np.exp(logdet - logdet0)) if sign > 0 and sign0 > 0 else np.nan,
                "trace": float(np.trace(v) / np.trace(v0))}


def fit(model, X, policy: Policy, seed: int = 0, prior_var: float | None = None,
        tune_beta: bool = False, max_rounds: int = 10, tol: float = 1e-3,
        max_steps: int = 200) -> SCLFit:
    """Maximise the stochastic composite likelihood of ``model`` on ``X`` under ``policy``.

    Args:
        model: a component model (e.g. :class:`~approxcv.composite.BoltzmannMachine`).
        X: its data (for a Boltzmann machine an ``(n, m)`` 0/1 array).
        policy: the :class:`~approxcv.composite.Policy` (groups, ``lambda``, ``beta``).
        seed: seed of the selections ``Z`` (one draw per sample, by sample index).
        prior_var: ``sigma^2`` of a Gaussian prior on the parameters (``None``: none).
        tune_beta: choose ``beta`` by the seed's §7 heuristic (Algorithm 1: fit, re-estimate
            ``beta`` at the plug-in estimate, refit warm, until ``beta`` moves less than
            ``tol`` or ``max_rounds``); the policy's ``weight`` is the first ``beta``.
        max_steps: BFGS steps of each fit.

    Raises:
        ArgumentTypeError: ``model`` is not a component model (a ``LinearChainCRF`` is
            passed as ``CRFComponents(crf)``).
        InvalidDataError: ``X`` is not valid data for ``model`` (named).
        InvalidArgumentError: the policy's components miss a parameter.
    """
    check_component_model(model)
    t = time.perf_counter()
    scl = SCLModel(model, policy, seed=seed, prior_var=prior_var, max_steps=max_steps)
    data = scl.prepare(X)[0]
    params = scl.fit(data)
    history = []
    if tune_beta:
        for _ in range(int(max_rounds)):
            beta = heuristic_beta(scl, data, params)
            history.append(beta.tolist())
            old = np.array([v[0] for v in scl.policy.weight])
            scl = SCLModel(model, scl.policy.with_weight(list(beta)), seed=seed,
                           prior_var=prior_var, max_steps=max_steps)
            data = scl.prepare(data.samples)[0]
            params = scl.fit(data, u0=params.theta)
            if np.max(np.abs(beta - old)) < tol:
                break
    return SCLFit(params, scl, data, time.perf_counter() - t, history)
