"""A fitted hmmlearn model as it is: :func:`from_hmmlearn` ``-> (model, params)``.

The model is approxcv's family of the same emissions — :class:`GaussianHMM`,
:class:`PoissonHMM`, :class:`CategoricalHMM` — with hmmlearn's objective as its ``prior``
(:mod:`approxcv.models.hmm.hmmlearn_prior`: its likelihood and its priors, whose stationary
points are its MAP-EM's fixed points), and ``params`` are the estimator's fitted attributes
in hmmlearn's state order; no refit. So the IJ expands around hmmlearn's own fit, and
``method="exact"`` refits hmmlearn's objective.

Parameters the data cannot move are held fixed (:class:`~approxcv.errors.HeldFixedWarning`
says which; ``model.prior.reasons`` records them), instead of leaving a Hessian that every
fold's estimate divides by ~0:

* an entry of ``startprob_``, ``transmat_`` or ``emissionprob_`` that is exactly 0, or whose
  expected count at the fit (its row's expected count times the probability) is below
  :data:`HOLD_COUNT` (without the data: a probability below :data:`HOLD_PROBABILITY`) —
  hmmlearn's EM only approaches such a boundary, geometrically;
* ``startprob_`` of a single sequence when ``startprob_prior <= 1``: the likelihood is linear
  in it, so its optimum is a vertex of the simplex, which EM only approaches;
* a parameter hmmlearn did not estimate (its letter missing from ``estimator.params``).

With the data (``X``, ``lengths``: as given to ``estimator.fit``) the fit is checked to be a
stationary point of its objective (the Newton step, as ``cross_validate`` measures it); where
it is not — hmmlearn's defaults stop after ``n_iter=10`` EM steps or at a gain below
``tol=1e-2`` — an :class:`~approxcv.errors.InexactFitWarning` says what to call. It is
also checked to be the optimum approxcv's own fit of the same objective finds (else it is a
poorer local optimum of EM, and every approximate fold at it is marked:
:func:`~approxcv.models.hmm._converted.poorer_optimum`). ``model.fit_result_`` records the
checks.
"""
from __future__ import annotations

import warnings

import numpy as np

from ...errors import (ArgumentTypeError, HeldFixedWarning, InexactFitWarning,
                       InvalidArgumentError, InvalidDataError, UnfittedEstimatorError,
                       UnsupportedEstimatorError, user_stacklevel)
from .. import constraints as C
from ._converted import (HOLD_COUNT, HOLD_PROBABILITY, STATIONARY_RTOL,  # noqa: F401
                         expected_counts, listed, newton_step, poorer_optimum, simplex_hold,
                         small_counts)
from .categorical_hmm import CategoricalHMM, CategoricalHMMParams
from .gaussian_hmm import GaussianHMM, GaussianHMMParams
from .hmmlearn_prior import (HmmlearnCategoricalPrior, HmmlearnGaussianPrior,
                             HmmlearnPoissonPrior)
from .poisson_hmm import PoissonHMM, PoissonHMMParams

__all__ = ["from_hmmlearn", "hmmlearn_data"]

#: hmmlearn's fitted attributes, by class
_FITTED = {"GaussianHMM": ("startprob_", "transmat_", "means_", "covars_"),
           "PoissonHMM": ("startprob_", "transmat_", "lambdas_"),
           "CategoricalHMM": ("startprob_", "transmat_", "emissionprob_")}
#: hmmlearn's letter in ``params`` of each field of approxcv's parameters
_LETTERS = {"initial_probs": "s", "transition_matrix": "t", "means": "m", "variances": "c",
            "rates": "l", "emission_probs": "e"}
#: hmmlearn's attribute of each field (for messages)
_ATTRIBUTES = {"initial_probs": "startprob_", "transition_matrix": "transmat_",
               "means": "means_", "variances": "covars_", "rates": "lambdas_",
               "emission_probs": "emissionprob_"}


def hmmlearn_data(X, lengths=None):
    """hmmlearn's data ``X (sum(lengths), n_features)`` with ``lengths`` as approxcv's:
    the array itself for one sequence, else the list of the sequences (level
    ``"structure"``: whole sequences are the units of cross-validation).

    Raises:
        InvalidArgumentError: ``lengths`` are not positive integers summing to ``len(X)``.
    """
    X = np.asarray(X)
    if lengths is None:
        return X
    lengths = np.asarray(lengths)
    if (lengths.ndim != 1 or lengths.size == 0 or lengths.dtype.kind not in "iu"
            or np.any(lengths < 1) or int(lengths.sum()) != len(X)):
        raise InvalidArgumentError(
            f"`lengths` must be positive integers summing to len(X) = {len(X)} (hmmlearn's "
            f"lengths of the sequences in X), got {lengths.tolist()!r}")
    if lengths.size == 1:
        return X
    return list(np.split(X, np.cumsum(lengths)[:-1]))


def from_hmmlearn(estimator, X=None, lengths=None, check_optimum: bool = True):
    """``(model, params)``: a fitted hmmlearn model as an approxcv model and its parameters.

    Args:
        estimator: a fitted ``hmmlearn.hmm.GaussianHMM`` (``covariance_type`` ``"diag"``;
            ``"spherical"`` and ``"full"`` with one feature), ``PoissonHMM`` (one feature)
            or ``CategoricalHMM``.
        X, lengths: optional, the data the estimator was fitted to (as given to its
            ``fit``). With them, the parameters the data cannot move are found by their
            expected counts and the fit is checked to be stationary (module docstring);
            needed for a ``PoissonHMM`` with a ``lambdas_prior`` or ``lambdas_weight``.
        check_optimum: with ``X``, also fit hmmlearn's objective in approxcv (the model's
            starts and hmmlearn's fit; about the cost of one fit): where that finds a lower
            optimum, hmmlearn's EM stopped at a poorer local one, which is warned
            (:class:`~approxcv.errors.LocalOptimumWarning`) and recorded, so that
            cross-validation at ``params`` marks every approximate fold
            (``fit_result_["optimum_check"]`` records the two objectives).

    Returns:
        ``(model, params)``; pass ``model``, ``params`` and ``hmmlearn_data(X, lengths)``
        to :func:`approxcv.cross_validate` (or ``model.predict(params, data)``, ...).

    Raises:
        UnfittedEstimatorError: the estimator has not been fitted.
        UnsupportedEstimatorError: another class, an unsupported ``covariance_type``, a
            PoissonHMM with several features.
    """
    name = _family_name(estimator)
    missing = [a for a in _FITTED[name] if not hasattr(estimator, a)]
    if missing:
        raise UnfittedEstimatorError(
            f"the hmmlearn {name} is not fitted (it has no {', '.join(missing)}): call "
            "estimator.fit(X, lengths) first, or set those attributes")
    data = None if X is None else hmmlearn_data(X, lengths)
    k = int(estimator.n_components)
    start, trans = _array(estimator.startprob_, (k,)), _array(estimator.transmat_, (k, k))
    chain = {"startprob": _prior(estimator.startprob_prior, (k,), "startprob_prior"),
             "transmat": _prior(estimator.transmat_prior, (k, k), "transmat_prior")}
    build = {"GaussianHMM": _gaussian, "PoissonHMM": _poisson,
             "CategoricalHMM": _categorical}[name]
    cls, params, emission = build(estimator, k, start, trans, data)
    shares = emission is None          # a Poisson prior weighted by the states' shares
    if shares and data is None:
        raise InvalidArgumentError(
            "from_hmmlearn: a PoissonHMM with lambdas_prior or lambdas_weight needs its "
            "data: hmmlearn's update weights that prior by each state's share of the steps; "
            "pass X (and lengths) as given to estimator.fit")
    held = _held_by_estimator(estimator, params)
    held.update(_held_at_boundary(params, held, None, zeros_only=data is not None))
    if data is not None:
        model = _model(cls, estimator, chain, _poisson_mle(k) if shares else emission, held)
        counts = expected_counts(model, params, data)
        if shares:
            emission = _poisson_shares(estimator, counts["occupancy"])
        held.update(_held_start(estimator, params, chain, data, held))
        held.update(_held_at_boundary(params, held, counts))
    model = _model(cls, estimator, chain, emission, held)
    if held:
        warnings.warn(
            f"from_hmmlearn: held fixed, as the data cannot move them (or hmmlearn did not "
            f"estimate them): {'; '.join(model.prior.reasons)}. Cross-validation treats "
            "them as known (model.prior.reasons records them)", HeldFixedWarning,
            stacklevel=user_stacklevel())
    model.fit_result_ = {"source": f"hmmlearn {name}", "held": list(model.prior.reasons),
                         "monitor": _monitor(estimator)}
    if data is not None:
        model.fit_result_.update(_stationarity(model, params, data, estimator))
        if check_optimum:
            model.fit_result_.update(poorer_optimum(model, params, data,
                                                    f"hmmlearn's {name} fit"))
    return model, params


# ------------------------------------------------------------------ families
def _family_name(estimator) -> str:
    try:
        from hmmlearn import hmm
    except ImportError as exc:        # an optional dependency, imported when used
        raise ImportError("from_hmmlearn needs hmmlearn: pip install 'approxcv[hmmlearn]'"
                          ) from exc
    for name in _FITTED:
        if isinstance(estimator, getattr(hmm, name)):
            return name
    raise UnsupportedEstimatorError(
        f"from_hmmlearn takes a fitted hmmlearn GaussianHMM, PoissonHMM or CategoricalHMM; "
        f"got {type(estimator).__module__}.{type(estimator).__name__} (GMMHMM, "
        "MultinomialHMM and the variational models have no approxcv counterpart)")


def _gaussian(est, k, start, trans, data):
    r = int(est.n_features)
    kind = est.covariance_type
    if kind not in ("diag", "spherical", "full") or (kind != "diag" and r > 1):
        raise UnsupportedEstimatorError(
            f"from_hmmlearn: GaussianHMM(covariance_type={kind!r}) with {r} features cannot "
            "be represented: approxcv's GaussianHMM has one variance per state and feature "
            "(\"diag\"; \"spherical\" and \"full\" only with one feature, where they are the "
            "same; \"tied\" shares a covariance across states). Refit hmmlearn with "
            "covariance_type=\"diag\", or fit acv.models.ARHMM(n_states, order=0, "
            "covariance=\"full\") in approxcv")
    means = _array(est.means_, (k, r))
    covars = np.diagonal(np.asarray(est.covars_, np.float64), axis1=-2, axis2=-1)
    params = GaussianHMMParams(start, trans, means, _array(covars, (k, r)), np.zeros((k, 0, r)))
    cp = np.asarray(est.covars_prior, np.float64)
    if kind == "full" and cp.ndim >= 2:
        cp = np.diagonal(cp, axis1=-2, axis2=-1)             # (K, 1, 1) -> (K, 1)
    dof = np.maximum(np.asarray(est.covars_weight, np.float64) - 1.0, 0.0)
    emission = {"means_prior": _prior(est.means_prior, (k, r), "means_prior", any_sign=True),
                "means_weight": _prior(est.means_weight, (k, r), "means_weight"),
                "covars_prior": _prior(cp, (k, r), "covars_prior"),
                "dof": _prior(dof, (k, r), "covars_weight")}
    return GaussianHMM, params, emission


def _poisson(est, k, start, trans, data):
    lambdas = np.asarray(est.lambdas_, np.float64)
    if lambdas.ndim != 2 or lambdas.shape[1] != 1:
        raise UnsupportedEstimatorError(
            f"from_hmmlearn: a PoissonHMM with {lambdas.shape[-1]} features (lambdas_ of "
            f"shape {lambdas.shape}) cannot be represented: approxcv's PoissonHMM has one "
            "count per step. Fit one hmmlearn PoissonHMM per feature, or pass one column")
    params = PoissonHMMParams(start, trans, _array(lambdas[:, 0], (k,)))
    a = _prior(est.lambdas_prior, (k, 1), "lambdas_prior")
    b = _prior(est.lambdas_weight, (k, 1), "lambdas_weight")
    if not (np.any(np.asarray(a)) or np.any(np.asarray(b))):     # the MLE, exactly
        return PoissonHMM, params, _poisson_mle(k)
    return PoissonHMM, params, None


def _poisson_mle(k):
    """Gamma terms of the maximum likelihood: shape 1, rate 0."""
    return {"shape": C.nested_tuple(np.ones(k)), "rate": C.nested_tuple(np.zeros(k))}


def _poisson_shares(est, occupancy):
    """Gamma terms at the fit's state shares ``w_k = N_k / n`` (hmmlearn_prior docstring)."""
    k = len(occupancy)
    a = np.broadcast_to(np.asarray(est.lambdas_prior, np.float64), (k, 1))[:, 0]
    b = np.broadcast_to(np.asarray(est.lambdas_weight, np.float64), (k, 1))[:, 0]
    share = occupancy / occupancy.sum()
    return {"shape": C.nested_tuple(1.0 + a * share), "rate": C.nested_tuple(b * share)}


def _categorical(est, k, start, trans, data):
    v = int(est.n_features)
    params = CategoricalHMMParams(start, trans, _array(est.emissionprob_, (k, v)))
    return CategoricalHMM, params, {
        "emissionprob": _prior(est.emissionprob_prior, (k, v), "emissionprob_prior")}


_PRIORS = {GaussianHMM: HmmlearnGaussianPrior, PoissonHMM: HmmlearnPoissonPrior,
           CategoricalHMM: HmmlearnCategoricalPrior}


def _model(cls, est, chain, emission, held):
    """The approxcv model of ``cls`` with hmmlearn's objective and the ``held`` fields
    (``{field: (constraint, [reasons])}``)."""
    prior = _PRIORS[cls](**chain, **emission,
                         held=tuple((f, c) for f, (c, _) in held.items()),
                         reasons=tuple(r for _, rs in held.values() for r in rs))
    k = int(est.n_components)
    extra = {"n_symbols": int(est.n_features)} if cls is CategoricalHMM else {}
    return cls(k, **extra, prior=prior)


# ---------------------------------------------------------------- held fixed
def _held_by_estimator(est, params) -> dict:
    """Fields hmmlearn did not estimate (their letter missing from ``est.params``)."""
    held = {}
    for field in params._fields:
        letter = _LETTERS.get(field)
        if letter is not None and letter not in est.params:
            held[field] = (C.Fixed(C.nested_tuple(getattr(params, field))),
                           [f"{_ATTRIBUTES[field]} (not estimated: params={est.params!r} "
                            f"lacks {letter!r})"])
    return held


def _simplex_fields(params):
    return [f for f in ("initial_probs", "transition_matrix", "emission_probs")
            if f in params._fields]


def _held_at_boundary(params, held, counts, zeros_only: bool = False) -> dict:
    """Simplex entries at 0, or of expected count below :data:`HOLD_COUNT` (with
    ``counts``: ``{field: expected count of each row}``), else below
    :data:`HOLD_PROBABILITY` (``zeros_only``: the entries at 0 only)."""
    out = {}
    for field in _simplex_fields(params):
        if isinstance(held.get(field, (None,))[0], C.Fixed):
            continue
        p = np.asarray(getattr(params, field))
        if counts is None:
            small = p < (0.0 if zeros_only else HOLD_PROBABILITY)
        else:
            small = small_counts(p, counts[field])
        small |= p == 0
        if not small.any():
            continue
        entries = [f"{_ATTRIBUTES[field]}{[int(j) for j in i]} = {p[i]:.3g}"
                   for i in zip(*np.nonzero(small))]
        why = "expected count below 1e-6 at the fit" if counts is not None else \
            f"below {HOLD_PROBABILITY:g}"
        constraint = simplex_hold(p, small)
        shown = listed(entries)
        out[field] = (constraint, [f"{shown} ({why}: a boundary EM only approaches)"])
    return out


def _held_start(est, params, chain, data, held) -> dict:
    """``startprob_`` of one sequence with ``startprob_prior <= 1``, held whole."""
    one = not isinstance(data, list)
    if not one or np.any(np.asarray(chain["startprob"]) > 1.0) or isinstance(
            held.get("initial_probs", (None,))[0], C.Fixed):
        return {}
    return {"initial_probs": (C.Fixed(C.nested_tuple(params.initial_probs)), [
        f"startprob_ = {np.array2string(np.asarray(params.initial_probs), precision=3)} "
        "(one sequence: its likelihood is linear in startprob_, whose optimum is a vertex "
        "of the simplex that EM only approaches)"])}



# --------------------------------------------------------------- stationary?
def _monitor(est) -> dict | None:
    """hmmlearn's ``monitor_``: iterations, ``n_iter``, ``tol`` and whether the last gain
    was below ``tol`` (its ``converged`` is also true when ``n_iter`` ran out)."""
    mon = getattr(est, "monitor_", None)
    if mon is None:
        return None
    hist = list(mon.history)
    by_tol = len(hist) >= 2 and hist[-1] - hist[-2] < mon.tol
    return {"iter": int(mon.iter), "n_iter": int(mon.n_iter), "tol": float(mon.tol),
            "converged_by_tol": bool(by_tol)}


def _stationarity(model, params, data, est) -> dict:
    """The Newton step ``||H^{-1} g||`` of hmmlearn's objective at its fit; an
    :class:`InexactFitWarning` that says what to call when it is not stationary."""
    check = newton_step(model, params, data)
    grad_norm, step_norm = check["grad_norm"], check["newton_step_norm"]
    if not check["stationary"]:
        mon = _monitor(est)
        ran = ("" if mon is None else
               f" (hmmlearn ran {mon['iter']} of n_iter={mon['n_iter']} EM iterations"
               + (f", the last gain below tol={mon['tol']:g})" if mon["converged_by_tol"]
                  else f" and stopped at n_iter, not at tol={mon['tol']:g})"))
        warnings.warn(
            f"from_hmmlearn: hmmlearn's fit is not a stationary point of its objective "
            f"(Newton step {step_norm:.3g}, gradient norm {grad_norm:.3g}){ran}, so "
            "approximate CV around it is inexact. Refit hmmlearn to convergence (a larger "
            "n_iter and a smaller tol, e.g. n_iter=1000, tol=1e-8, starting from this fit "
            "with init_params=\"\"), or refit its objective in approxcv: params = "
            "model.fit(data)", InexactFitWarning, stacklevel=user_stacklevel())
    return check


# ------------------------------------------------------------------- arrays
def _array(value, shape) -> np.ndarray:
    arr = np.asarray(value, dtype=np.float64)
    if arr.shape != shape:
        raise InvalidDataError(f"from_hmmlearn: an hmmlearn attribute has shape {arr.shape}, "
                               f"expected {shape}; is the estimator fitted and consistent?")
    if not np.all(np.isfinite(arr)):
        raise InvalidDataError("from_hmmlearn: the estimator's fitted attributes hold NaN or "
                               "inf; refit it")
    return arr


def _prior(value, shape, name: str, any_sign: bool = False) -> tuple:
    """hmmlearn's prior ``value`` broadcast to ``shape`` as its M-step broadcasts it."""
    try:
        arr = np.broadcast_to(np.asarray(value, dtype=np.float64), shape)
    except (TypeError, ValueError) as exc:
        raise ArgumentTypeError(
            f"from_hmmlearn: the estimator's {name} (shape {np.shape(value)}) does not "
            f"broadcast to {shape}; give it as a number or an array of that shape") from exc
    if not np.all(np.isfinite(arr)) or (not any_sign and np.any(arr < 0)):
        raise InvalidArgumentError(f"from_hmmlearn: the estimator's {name} must be finite"
                                   + ("" if any_sign else " and >= 0"))
    return C.nested_tuple(arr)
