"""The SCL objective as a model of the approxcv protocol (seed eq. 10-11).

For samples ``x^(i)`` with selections ``Z^(i)`` (:func:`~approxcv.composite.policy.
draw_selection`) and weights ``beta``, the weighted objective of a fold's weights ``w`` is

    F(theta, w) = - sum_i w_i sum_j c_ij S_theta(A_j, B_j; x^(i)) + ||theta||^2 / (2 sigma^2),
    c_ij = beta_j Z_ij,

the negative SCL (seed eq. 10 without its ``1/n``) plus an optional Gaussian prior
(``prior_var = sigma^2``, as in §8). An SCL objective is a weighted objective, so IJ, NS and
exact CV apply unchanged; the units are the samples, each carrying its own draw, so a fold
with ``w_i = 0`` leaves out the sample and its draw together. The held-out loss of a
left-out sample is its full negative log-likelihood ``-log p_theta(x^(i))`` (the
normaliser is tractable for every model here), whatever components trained ``theta``.

The coefficients ``c`` travel with the data (:class:`SCLData`), so swapping ``Z`` for its
mean ``lambda`` (the printed eq. 17's expected-selection objective) or one group's
indicator (the beta heuristic) reuses the same compiled functions.
"""
from __future__ import annotations

import functools
import warnings
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ..errors import user_stacklevel
from .._runtime import jit
from .._validate import check_positive, check_positive_int
from ..errors import (ArgumentTypeError, ConvergenceWarning, InvalidArgumentError,
                      NonIdentifiableWarning)
from ..models import constraints as C
from ..models.base import Model, check_weights, left_out
from .components import check_component_model
from .policy import Policy, draw_selection
from ..problem import make_problem
from ..optim.newton import value_and_derivatives
from ..optim import batched_minimize
from ..fitting import fit_method, single_run

__all__ = ["SCLModel", "SCLData", "SCLParams"]


class SCLParams(NamedTuple):
    """``theta (D,)``: the component model's flat parameter vector."""
    theta: np.ndarray


class SCLData(NamedTuple):
    """Prepared data: the component model's ``samples`` (leading axis ``n``) and the
    coefficients ``coef (n, k)`` ``c_ij = beta_j Z_ij`` of every sample and component."""
    samples: Any
    coef: jax.Array


@functools.partial(jit, static_argnums=0)
def _component_table(model, theta, samples):
    return model.component_log_probs(theta, samples)


class SCLModel(Model):
    """Maximum SCL estimation of ``base`` under ``policy`` as an approxcv model.

    Args:
        base: a component model (:class:`~approxcv.composite.BoltzmannMachine`, ...).
        policy: a :class:`~approxcv.composite.Policy` (bound to ``base``).
        seed: seed of the selections ``Z``.
        prior_var: ``sigma^2`` of the Gaussian prior on ``theta`` (``None``: none).
        max_steps: BFGS steps of a fit (200 converge the Boltzmann machines here, where the
            Newton polish finishes; chains with hundreds of parameters need more).

    Raises:
        ArgumentTypeError: ``base`` is not a component model (e.g. a ``LinearChainCRF``
            where ``CRFComponents(crf)`` is meant) or ``policy`` not a :class:`Policy`.
        InvalidArgumentError: the policy's components with a positive weight do not reach
            every parameter (the unidentified ones are named).
    """
    refit_solver = "bfgs"
    refit_restarts = 0

    def __init__(self, base, policy: Policy, seed: int = 0, prior_var: float | None = None,
                 max_steps: int = 200):
        self.base = check_component_model(base, "base")
        if not isinstance(policy, Policy):
            raise ArgumentTypeError(f"`policy` must be an approxcv.composite.Policy, got "
                                    f"{type(policy).__name__}")
        self.policy = policy.bind(base)
        self.seed = int(seed)
        self.prior_var = None if prior_var is None else check_positive("prior_var", prior_var)
        self.max_steps = check_positive_int("max_steps", max_steps)
        # a component of weight 0 adds nothing to the objective
        weighted = [it for it, b in zip(self.policy.items, self.policy.beta) if b > 0]
        missing = base.unidentified(weighted)
        if missing:
            raise InvalidArgumentError(
                f"`policy`: its components do not identify every parameter of {base!r}: "
                f"{len(missing)} parameter(s) enter no selected component of positive "
                f"weight ({missing[:6]}"
                f"{' ...' if len(missing) > 6 else ''}); add components that condition on "
                "fewer nodes (e.g. pseudo_likelihood(model, 1))")
        self.stacks_ = base.stacks(self.policy.items)
        self.fit_result_: dict | None = None

    # ----------------------------------------------------------------- data
    def prepare(self, data, level: str | None = None):
        """``(SCLData, "within", n)``: the samples validated by the component model and
        their coefficients ``beta_j Z_ij`` drawn from ``seed`` (per sample index)."""
        if level not in (None, "within"):
            raise InvalidArgumentError(f"`level` must be 'within' for an SCL model (its units "
                                       f"are the samples), got {level!r}")
        if isinstance(data, SCLData):
            return data, "within", int(data.coef.shape[0])
        samples = self.base.prepare_samples(data)
        n = int(jax.tree_util.tree_leaves(samples)[0].shape[0]) if not hasattr(
            samples, "num_samples") else samples.num_samples
        return SCLData(samples, jnp.asarray(self.coefficients(n))), "within", n

    def selections(self, n: int) -> np.ndarray:
        """The draws ``Z (n, k)`` of samples ``0 .. n-1``."""
        return draw_selection(self.policy, n, self.seed)

    def coefficients(self, n: int, form: str = "draws") -> np.ndarray:
        """``c (n, k)``: ``beta_j Z_ij`` (``"draws"``) or ``beta_j lambda_j`` (``"mean"``)."""
        if form == "mean":
            return np.tile(self.policy.beta * self.policy.lam, (n, 1))
        return self.selections(n) * self.policy.beta[None]

    def with_coefficients(self, data: SCLData, coef) -> SCLData:
        return SCLData(data.samples, jnp.asarray(coef, dtype=jnp.float64))

    def objective_scale(self, data) -> float:
        return float(data.coef.shape[0])

    # ----------------------------------------------------------- parameters
    def param_constraints(self):
        return SCLParams(C.Real())

    def init_params(self, data, level: str | None = None, n: int = 1, seed: int = 0) -> list:
        """``n`` starts: the component model's default, then small Gaussian perturbations."""
        data, _, _ = self.prepare(data, level)
        theta0 = np.asarray(self.base.zero_params(data.samples), dtype=np.float64)
        rng = np.random.default_rng(seed)
        return [SCLParams(theta0 if i == 0 else theta0 + 0.1 * rng.normal(size=theta0.shape))
                for i in range(n)]

    # ------------------------------------------------------------ objective
    def component_log_probs(self, theta, samples):
        """``S (n, k)``: every component's log-likelihood object on every sample."""
        k = self.policy.n_components
        cols = [None] * k
        for stack in self.stacks_:
            vals = self.base.stack_log_probs(theta, samples, stack)
            for col, j in enumerate(stack.index):
                cols[j] = vals[:, col]
        return jnp.stack(cols, axis=1)

    def component_table(self, theta, samples) -> np.ndarray:
        """:meth:`component_log_probs` compiled (once per model structure), as NumPy."""
        return np.asarray(_component_table(self, jnp.asarray(theta, jnp.float64), samples))

    def per_sample_scl(self, theta, data: SCLData):
        """``m_theta(x^(i), Z^(i)) = sum_j c_ij S_ij`` (seed eq. 11), ``(n,)``."""
        out = 0.0
        for stack in self.stacks_:
            vals = self.base.stack_log_probs(theta, data.samples, stack)
            out = out + jnp.sum(vals * data.coef[:, np.array(stack.index)], axis=1)
        return out

    def log_prior(self, theta):
        if self.prior_var is None:
            return 0.0
        return -0.5 * jnp.sum(theta ** 2) / self.prior_var

    def objective(self, params, data, weights, scheme: str = "A", level: str | None = None):
        """``F(theta, w) = -sum_i w_i sum_j c_ij S_ij - log prior`` (module docstring)."""
        data, _, n = self.prepare(data, level)
        weights = check_weights(weights, n, "sample")
        theta = jnp.asarray(params.theta)
        return -jnp.dot(weights, self.per_sample_scl(theta, data)) - self.log_prior(theta)

    def heldout_loss(self, params, data, weights, level: str | None = None):
        """``-log p_theta(x^(i))`` of every left-out sample (full likelihood), 0 elsewhere."""
        data, _, n = self.prepare(data, level)
        weights = check_weights(weights, n, "sample")
        nll = -self.base.log_prob_samples(jnp.asarray(params.theta), data.samples)
        points = jnp.where(left_out(weights), nll, 0.0)
        return jnp.sum(points), points

    # ------------------------------------------------------------------ fit
    def fit(self, data, level: str | None = None, u0=None):
        """Maximise the SCL (plus prior) with BFGS and a Newton polish
        (:func:`approxcv.optim.batched_minimize`) from the component model's start (or
        ``u0``); the run is recorded in ``fit_result_``.

        A fit whose Hessian has a direction of no curvature or in which the Newton step
        is not small (:func:`unbounded_parameters`: the data do not bound those
        parameters, e.g. the couplings of a node that is never on, whose maximiser lies at
        infinity) is not converged: ``fit_result_["unidentified"]`` names the parameters
        (a prior, ``prior_var``, bounds them).

        Warns:
            ConvergenceWarning: the optimiser stopped before its criterion was met.
            NonIdentifiableWarning: the data do not bound some parameters (named).
        """
        data, level, n = self.prepare(data, level)
        start = self.init_params(data)[0] if u0 is None else SCLParams(np.asarray(u0))
        problem = make_problem(self, data, start, checked=True)
        newton_steps, method = fit_method(int(problem.u_full.shape[0]))
        # BFGS is the default method: called with the arguments the exact-CV and table
        # tests use, the cached, compiled solver is the same
        solve = (batched_minimize(problem.fun, problem.scale, self.max_steps, newton_steps)
                 if method == "bfgs" else
                 batched_minimize(problem.fun, problem.scale, self.max_steps, newton_steps,
                                  method))
        u, record = single_run(solve, problem.u_full, np.ones(n), data)
        self.fit_result_ = {**record, "unidentified": []}
        if method == "bfgs" and np.all(np.isfinite(u)):     # dense: the Hessian is formed
            # the program of the polish, the IJ and the sandwich (compiled once)
            _, grad, hess, _ = value_and_derivatives(problem.fun, jnp.asarray(u),
                                                     np.ones(n), data, True)
            names = getattr(self.base, "param_names", None)
            names = names() if callable(names) else [f"theta[{k}]" for k in range(u.size)]
            flat = [names[k] for k in unbounded_parameters(hess, grad)]
            self.fit_result_["unidentified"] = flat
            if flat:
                self.fit_result_["converged"] = False
                warnings.warn(
                    f"SCL fit: the data do not bound {len(flat)} parameter(s) "
                    f"({', '.join(flat[:6])}{' ...' if len(flat) > 6 else ''}; at "
                    f"{np.round(u[[names.index(f) for f in flat[:6]]], 3).tolist()}): the "
                    "objective keeps decreasing along them (e.g. a node never on in the "
                    "data) and no prior holds them; the fit is not converged and its "
                    "variance and CV are not meaningful. Pass `prior_var` or drop the "
                    "unobserved part of the model", NonIdentifiableWarning, stacklevel=user_stacklevel())
                return SCLParams(u)
        if not self.fit_result_["converged"]:
            warnings.warn(f"SCL fit did not converge in {self.max_steps} steps (gradient norm "
                          f"{self.fit_result_['grad_norm']:.3g})", ConvergenceWarning,
                          stacklevel=user_stacklevel())
        return SCLParams(u)

    def static_key(self) -> tuple:
        """The component model, the components (by group), the prior and the step limit.

        ``lambda``, ``beta``, the kind of ``P(Z)`` and the seed enter the objective only
        through the prepared coefficients ``c = beta Z`` (:class:`SCLData`), so models that
        differ only in them share every compiled function (one compilation for a whole
        grid of policies); the data fingerprint of checkpoints still tells them apart.
        """
        return (("base", self.base), ("components", tuple(g.items for g in self.policy.groups)),
                ("prior_var", self.prior_var), ("max_steps", self.max_steps))

    def __repr__(self) -> str:
        return (f"SCLModel({self.base!r}, {self.policy.label()}, seed={self.seed}, "
                f"prior_var={self.prior_var})")


#: a Hessian eigenvalue below this fraction of the largest is a direction of no curvature
FLAT_RTOL = 1e-12
#: a Newton step from the fit longer than this along an eigenvector (in the parameter's
#: units) says the minimum lies further out: ``|v^T g| / lambda`` is 1 along a direction
#: in which the objective decays exponentially (a log-linear model's parameter heading to
#: infinity) however small ``g``, and ~1e-16 at a converged minimum
FLAT_STEP = 1e-3


def unbounded_parameters(hess, grad) -> np.ndarray:
    """Indices of the parameters the objective does not bound at a fit: those loading (at
    least 0.3 of the largest entry) on an eigenvector ``v`` of ``H`` with eigenvalue
    ``lambda <= FLAT_RTOL max|lambda|`` or Newton step ``|v^T g| / lambda > FLAT_STEP``."""
    h = np.asarray(hess, dtype=np.float64)
    g = np.asarray(grad, dtype=np.float64)
    if not (np.all(np.isfinite(h)) and np.all(np.isfinite(g))):
        return np.arange(h.shape[0])
    evals, vecs = np.linalg.eigh(0.5 * (h + h.T))
    top = max(float(np.max(np.abs(evals))), np.finfo(float).tiny)
    with np.errstate(divide="ignore", invalid="ignore"):
        step = np.abs(vecs.T @ g) / evals
    flat = (evals <= FLAT_RTOL * top) | (step > FLAT_STEP)
    if not flat.any():
        return np.zeros(0, dtype=int)
    load = np.abs(vecs[:, flat])
    return np.flatnonzero(np.any(load >= 0.3 * load.max(0, keepdims=True), axis=1))
