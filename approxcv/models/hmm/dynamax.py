"""A dynamax HMM as it was fitted: :func:`from_dynamax` ``-> (model, params)``.

The model is approxcv's family of the same emissions — :class:`GaussianHMM`,
:class:`PoissonHMM`, :class:`CategoricalHMM` — with dynamax's objective as its ``prior``
(:mod:`approxcv.models.hmm.dynamax_prior`: dynamax's ``log_prior(params)`` term by term, so
the objective is ``-(sum of marginal_log_prob + log_prior)`` exactly), and ``params`` are
dynamax's fitted parameters in its state order; no refit. So the IJ expands around
dynamax's own fit, and ``method="exact"`` refits dynamax's objective.

Supported (each with approxcv's representation): ``DiagonalGaussianHMM`` (any number of
features), ``GaussianHMM`` and ``SphericalGaussianHMM`` with one feature (where a full or
spherical covariance is a variance), ``PoissonHMM`` and ``CategoricalHMM`` with
``emission_dim = 1``. Others are refused by name
(:class:`~approxcv.errors.UnsupportedEstimatorError`).

Held fixed (:class:`~approxcv.errors.HeldFixedWarning` says which; ``model.prior.reasons``
records them):

* a parameter ``props`` marks ``ParameterProperties(trainable=False)``: dynamax did not fit
  it, so cross-validation treats it as known;
* an entry of ``initial.probs``, ``transitions.transition_matrix`` or ``emissions.probs``
  that is exactly 0, or whose Dirichlet concentration is ``<= 1`` and whose expected count
  at the fit (with ``emissions``; else its probability) is below
  :data:`~approxcv.models.hmm._converted.HOLD_COUNT` (``HOLD_PROBABILITY``): there the
  optimum is on the simplex's boundary, which EM only approaches (with a concentration
  ``> 1``, dynamax's default 1.1, the optimum is inside);
* ``initial.probs`` of one sequence when every initial concentration is ``<= 1``: the
  objective is then non-decreasing towards a vertex of the simplex.

With ``emissions`` (as given to ``fit_em``) the fit is checked to be the optimum approxcv's
own fit of the same objective finds (else it is a poorer local optimum of EM, and every
approximate fold at it is marked: :func:`~approxcv.models.hmm._converted.poorer_optimum`),
and to be a stationary point of its objective (the Newton step, as ``cross_validate``
measures it); where it is not — ``fit_em``'s default ``num_iters=50`` may stop early,
``SphericalGaussianHMM``'s M-step is 50 Adam steps, ``fit_sgd`` stops where it stops — an
:class:`~approxcv.errors.InexactFitWarning` says what to call. ``model.fit_result_``
records the checks.
"""
from __future__ import annotations

import warnings

import numpy as np

from ...errors import (ArgumentTypeError, HeldFixedWarning, InexactFitWarning,
                       InvalidArgumentError, InvalidDataError, UnfittedEstimatorError,
                       UnsupportedEstimatorError, user_stacklevel)
from .. import constraints as C
from ._converted import (HOLD_PROBABILITY, expected_counts, listed, newton_step,
                         poorer_optimum, simplex_hold, small_counts)
from .categorical_hmm import CategoricalHMM, CategoricalHMMParams
from .dynamax_prior import (DynamaxCategoricalPrior, DynamaxNIGPrior, DynamaxPoissonPrior,
                            DynamaxSphericalPrior)
from .gaussian_hmm import GaussianHMM, GaussianHMMParams
from .poisson_hmm import PoissonHMM, PoissonHMMParams

__all__ = ["from_dynamax", "dynamax_data"]

#: dynamax's ``InverseWishart`` inverts its scale by ``psd_solve``, which adds this to the
#: diagonal: its ``log_prior`` is that of the scale ``Psi0 + PSD_BOOST`` (its M-step uses
#: ``Psi0``: the two optima differ by ~1e-9 / N in the variance)
PSD_BOOST = 1e-9
#: dynamax's classes, with the name of their emission parameters' variance field
_CLASSES = {"GaussianHMM": "covs", "DiagonalGaussianHMM": "scale_diags",
            "SphericalGaussianHMM": "scales", "PoissonHMM": None, "CategoricalHMM": None}
#: the classes approxcv represents with one feature only, and why
_ONE_FEATURE = {
    "GaussianHMM": "approxcv's GaussianHMM has one variance per state and feature, so a full "
                   "covariance of several features has no counterpart (fit dynamax's "
                   "DiagonalGaussianHMM, or acv.models.ARHMM(n_states, order=0, "
                   "covariance=\"full\") in approxcv)",
    "SphericalGaussianHMM": "approxcv's GaussianHMM has one variance per state and feature "
                            "and cannot tie them across features (fit dynamax's "
                            "DiagonalGaussianHMM)",
    "PoissonHMM": "approxcv's PoissonHMM has one count per step (fit one dynamax PoissonHMM "
                  "per feature)",
    "CategoricalHMM": "approxcv's CategoricalHMM has one symbol per step"}
#: dynamax's path of each field of approxcv's parameters (for messages and ``props``)
_PATHS = {"initial_probs": ("initial", "probs"),
          "transition_matrix": ("transitions", "transition_matrix"),
          "means": ("emissions", "means"), "rates": ("emissions", "rates"),
          "emission_probs": ("emissions", "probs")}


def dynamax_data(emissions):
    """dynamax's ``emissions`` as approxcv's data: ``(T, D)`` (or ``(T,)``) is one
    sequence, a batch ``(B, T, D)`` the list of its ``B`` sequences (level
    ``"structure"``: whole sequences are the units of cross-validation; a batch of one is
    its sequence).

    Raises:
        InvalidDataError: ``emissions`` has another number of dimensions.
    """
    x = np.asarray(emissions)
    if x.ndim in (1, 2):
        return x
    if x.ndim != 3:
        raise InvalidDataError(
            f"`emissions` must be one sequence (T, D) or a batch (B, T, D) as dynamax's "
            f"fit_em takes them, got shape {x.shape}")
    return x[0] if len(x) == 1 else list(x)


def from_dynamax(model, params, props=None, emissions=None, check_optimum: bool = True):
    """``(acv_model, acv_params)``: a fitted dynamax HMM as an approxcv model and its
    parameters, with dynamax's objective (module docstring).

    Args:
        model: a ``dynamax.hidden_markov_model`` ``DiagonalGaussianHMM``, ``GaussianHMM``
            or ``SphericalGaussianHMM`` (one feature), ``PoissonHMM`` or ``CategoricalHMM``
            (``emission_dim = 1``).
        params: its fitted parameters (from ``fit_em`` or ``fit_sgd``).
        props: the ``ParameterProperties`` tree of ``model.initialize``; parameters it marks
            ``trainable=False`` are held fixed. ``None``: every parameter was fitted.
        emissions: optional, the data as given to ``fit_em``. With it, the entries the data
            cannot move are found by their expected counts and the fit is checked to be
            stationary (module docstring).
        check_optimum: with ``emissions``, also fit dynamax's objective in approxcv (the
            model's starts and dynamax's fit; about the cost of one fit): where that finds
            a lower optimum, dynamax's EM stopped at a poorer local one, which is warned
            (:class:`~approxcv.errors.LocalOptimumWarning`) and recorded, so that
            cross-validation at ``acv_params`` marks every approximate fold
            (``fit_result_["optimum_check"]`` records the two objectives).

    Returns:
        ``(acv_model, acv_params)``; pass them and ``dynamax_data(emissions)`` to
        :func:`approxcv.cross_validate` (or ``acv_model.predict(acv_params, data)``, ...).

    Raises:
        UnfittedEstimatorError: ``params`` is missing, or is ``props``.
        UnsupportedEstimatorError: another class (or a subclass), or a setting approxcv's
            family cannot represent (several features of a full or spherical Gaussian, of a
            Poisson or categorical HMM).
        ArgumentTypeError: ``params`` or ``props`` is not of ``model``'s class.
    """
    name = _class_name(model)
    if name in _ONE_FEATURE and int(model.emission_dim) != 1:
        raise UnsupportedEstimatorError(
            f"from_dynamax: a {name} with emission_dim={int(model.emission_dim)} cannot be "
            f"represented: {_ONE_FEATURE[name]}")
    _check_params(name, model, params, props)
    k = int(model.num_states)
    start = _array(params.initial.probs, (k,), "params.initial.probs")
    trans = _array(params.transitions.transition_matrix, (k, k),
                   "params.transitions.transition_matrix")
    chain = {"initial": _prior(model.initial_component.initial_probs_concentration, (k,),
                               "initial_probs_concentration"),
             "transition": _prior(model.transition_component.concentration, (k, k),
                                  "transition_matrix_concentration (with stickiness)")}
    build = {"GaussianHMM": _full, "DiagonalGaussianHMM": _diagonal,
             "SphericalGaussianHMM": _spherical, "PoissonHMM": _poisson,
             "CategoricalHMM": _categorical}[name]
    cls, acv_params, prior_cls, emission = build(model, params, k, start, trans)
    concentrations = {"initial_probs": chain["initial"],
                      "transition_matrix": chain["transition"],
                      "emission_probs": emission.get("concentration")}
    data = None if emissions is None else dynamax_data(emissions)
    held = _held_by_props(name, params, props, acv_params)
    held.update(_held_at_boundary(acv_params, held, concentrations, None))
    if data is not None:
        counts = expected_counts(_model(cls, model, prior_cls, chain, emission, held),
                                 acv_params, data)
        held.update(_held_at_boundary(acv_params, held, concentrations, counts))
        held.update(_held_start(acv_params, held, chain, data))
    acv_model = _model(cls, model, prior_cls, chain, emission, held)
    if held:
        warnings.warn(
            f"from_dynamax: held fixed, as dynamax did not fit them or the data cannot move "
            f"them: {'; '.join(acv_model.prior.reasons)}. Cross-validation treats them as "
            "known (model.prior.reasons records them)", HeldFixedWarning,
            stacklevel=user_stacklevel())
    acv_model.fit_result_ = {"source": f"dynamax {name}",
                             "held": list(acv_model.prior.reasons)}
    if data is not None:
        acv_model.fit_result_.update(_stationarity(acv_model, acv_params, data, name))
        if check_optimum:
            acv_model.fit_result_.update(poorer_optimum(acv_model, acv_params, data,
                                                        f"dynamax's {name} fit"))
    return acv_model, acv_params


# ------------------------------------------------------------------ classes
def _class_name(model) -> str:
    try:
        from dynamax import hidden_markov_model as dhmm
    except ImportError as exc:        # an optional dependency, imported when used
        raise ImportError("from_dynamax needs dynamax: pip install 'approxcv[dynamax]'"
                          ) from exc
    for name in _CLASSES:
        if type(model) is getattr(dhmm, name):
            return name
    kind = f"{type(model).__module__}.{type(model).__name__}"
    raise UnsupportedEstimatorError(
        f"from_dynamax takes a dynamax DiagonalGaussianHMM, GaussianHMM, "
        f"SphericalGaussianHMM, PoissonHMM or CategoricalHMM (the class itself, not a "
        f"subclass, whose objective may differ); got {kind}. The shared-covariance, "
        "low-rank, mixture, autoregressive and regression HMMs have no approxcv counterpart "
        "with dynamax's prior: fit acv.models.GaussianHMM, ARHMM, ... in approxcv instead")


def _check_params(name, model, params, props):
    """``params`` (and ``props``) of ``model``'s class, fitted arrays rather than properties."""
    from dynamax.parameters import ParameterProperties
    if params is None:
        raise UnfittedEstimatorError(
            "from_dynamax needs the fitted parameters: params, props = model.initialize(key, "
            "...); params, lps = model.fit_em(params, props, emissions); then "
            "from_dynamax(model, params, props)")
    for tree, what in ((params, "params"), (props, "props")):
        if tree is None:
            continue
        fields = getattr(tree, "_fields", ())
        if fields != ("initial", "transitions", "emissions"):
            raise ArgumentTypeError(
                f"from_dynamax: `{what}` must be the {name}'s parameter tree (initial, "
                f"transitions, emissions) from its initialize/fit_em; got "
                f"{type(tree).__name__}")
    leaves = [getattr(part, f) for part in params for f in part._fields]
    if any(isinstance(leaf, ParameterProperties) for leaf in leaves):
        raise UnfittedEstimatorError(
            "from_dynamax: `params` holds ParameterProperties — that is `props`; pass the "
            "fitted parameters first: from_dynamax(model, params, props)")
    want = {"GaussianHMM": "covs", "DiagonalGaussianHMM": "scale_diags",
            "SphericalGaussianHMM": "scales", "PoissonHMM": "rates",
            "CategoricalHMM": "probs"}[name]
    for tree, what in ((params, "params"), (props, "props")):
        if tree is not None and want not in tree.emissions._fields:
            raise ArgumentTypeError(
                f"from_dynamax: `{what}` are not a {name}'s (its emissions have no "
                f"{want!r}; got {type(tree.emissions).__name__}): pass the parameters "
                "of this model")


def _full(model, params, k, start, trans):
    """A one-feature GaussianHMM: NIW(mu0, kappa0, nu0, Psi0) is NIG(mu0, kappa0, nu0 / 2,
    Psi0 / 2) (with :data:`PSD_BOOST` added to ``Psi0``, as dynamax's ``log_prior``)."""
    ec = model.emission_component
    means = _array(params.emissions.means, (k, 1), "params.emissions.means")
    var = _array(params.emissions.covs, (k, 1, 1), "params.emissions.covs")[:, 0]
    emission = {"loc": _prior(ec.emission_prior_mean, (k, 1), "emission_prior_mean", True),
                "mean_concentration": _prior(ec.emission_prior_conc, (k, 1),
                                             "emission_prior_concentration"),
                "shape": _prior(0.5 * np.asarray(ec.emission_prior_df), (k, 1),
                                "emission_prior_extra_df"),
                "scale": _prior(0.5 * (np.asarray(ec.emission_prior_scale)[..., 0, 0]
                                       + PSD_BOOST), (k, 1), "emission_prior_scale")}
    return GaussianHMM, _gaussian_params(start, trans, means, var), DynamaxNIGPrior, emission


def _diagonal(model, params, k, start, trans):
    ec = model.emission_component
    r = int(model.emission_dim)
    means = _array(params.emissions.means, (k, r), "params.emissions.means")
    sd = _array(params.emissions.scale_diags, (k, r), "params.emissions.scale_diags")
    emission = {"loc": _prior(ec.emission_prior_mean, (k, r), "emission_prior_mean", True),
                "mean_concentration": _prior(ec.emission_prior_mean_conc, (k, r),
                                             "emission_prior_mean_concentration"),
                "shape": _prior(ec.emission_prior_conc, (k, r), "emission_prior_concentration"),
                "scale": _prior(ec.emission_prior_scale, (k, r), "emission_prior_scale")}
    return GaussianHMM, _gaussian_params(start, trans, means, sd ** 2), DynamaxNIGPrior, emission


def _spherical(model, params, k, start, trans):
    ec = model.emission_component
    means = _array(params.emissions.means, (k, 1), "params.emissions.means")
    scales = _array(params.emissions.scales, (k,), "params.emissions.scales")
    emission = {"loc": _prior(ec.emission_prior_mean, (k, 1), "emission_prior_mean", True),
                "mean_var": _prior(np.asarray(ec.emission_prior_mean_cov)[..., 0, 0], (k, 1),
                                   "emission_prior_mean_covariance"),
                "shape": _prior(ec.emission_var_concentration, (k, 1),
                                "emission_var_concentration"),
                "rate": _prior(ec.emission_var_rate, (k, 1), "emission_var_rate")}
    return (GaussianHMM, _gaussian_params(start, trans, means, scales[:, None] ** 2),
            DynamaxSphericalPrior, emission)


def _gaussian_params(start, trans, means, variances):
    return GaussianHMMParams(start, trans, means, variances, np.zeros((len(start), 0,
                                                                        means.shape[1])))


def _poisson(model, params, k, start, trans):
    ec = model.emission_component
    rates = _array(params.emissions.rates, (k, 1), "params.emissions.rates")[:, 0]
    emission = {"shape": _prior(np.broadcast_to(ec.emission_prior_concentration, (k, 1)
                                                )[:, 0], (k,), "emission_prior_concentration"),
                "rate": _prior(np.broadcast_to(ec.emission_prior_rate, (k, 1))[:, 0], (k,),
                               "emission_prior_rate")}
    return PoissonHMM, PoissonHMMParams(start, trans, rates), DynamaxPoissonPrior, emission


def _categorical(model, params, k, start, trans):
    ec = model.emission_component
    v = int(ec.num_classes)
    probs = _array(params.emissions.probs, (k, 1, v), "params.emissions.probs")[:, 0]
    emission = {"concentration": _prior(ec.emission_prior_concentration, (k, v),
                                        "emission_prior_concentration")}
    return (CategoricalHMM, CategoricalHMMParams(start, trans, probs),
            DynamaxCategoricalPrior, emission)


def _model(cls, model, prior_cls, chain, emission, held):
    """The approxcv model of ``cls`` with dynamax's objective and the ``held`` fields
    (``{field: (constraint, [reasons])}``)."""
    prior = prior_cls(**chain, **emission,
                      held=tuple((f, c) for f, (c, _) in held.items()),
                      reasons=tuple(r for _, rs in held.values() for r in rs))
    extra = ({"n_symbols": int(model.emission_component.num_classes)}
             if cls is CategoricalHMM else {})
    return cls(int(model.num_states), **extra, prior=prior)


# ---------------------------------------------------------------- held fixed
def _path(field, name):
    if field == "variances":
        return f"emissions.{_CLASSES[name]}"
    return ".".join(_PATHS[field])


def _props_leaf(props, field, name):
    part, leaf = ("emissions", _CLASSES[name]) if field == "variances" else _PATHS[field]
    return getattr(getattr(props, part), leaf)


def _held_by_props(name, params, props, acv_params) -> dict:
    """Fields ``props`` marks ``trainable=False``, held whole at their values."""
    if props is None:
        return {}
    held = {}
    for field in acv_params._fields:
        if field == "ar_coeffs":
            continue
        if not getattr(_props_leaf(props, field, name), "trainable", True):
            held[field] = (C.Fixed(C.nested_tuple(getattr(acv_params, field))),
                           [f"{_path(field, name)} (trainable=False in props)"])
    return held


def _held_at_boundary(params, held, concentrations, counts) -> dict:
    """Simplex entries at 0, or with a concentration ``<= 1`` and an expected count below
    ``HOLD_COUNT`` (``counts``: ``{field: each row's expected count}``; without them, a
    probability below ``HOLD_PROBABILITY``)."""
    out = {}
    for field in ("initial_probs", "transition_matrix", "emission_probs"):
        if field not in params._fields or isinstance(held.get(field, (None,))[0], C.Fixed):
            continue
        p = np.asarray(getattr(params, field))
        boundary = np.broadcast_to(np.asarray(concentrations[field]), p.shape) <= 1.0
        small = small_counts(p, counts[field]) if counts is not None else p < HOLD_PROBABILITY
        small = (small & boundary) | (p == 0)
        if not small.any():
            continue
        why = ("concentration <= 1 and expected count below 1e-6 at the fit"
               if counts is not None else f"concentration <= 1 and below {HOLD_PROBABILITY:g}")
        entries = [f"{'.'.join(_PATHS[field])}{[int(j) for j in i]} = {p[i]:.3g}"
                   for i in zip(*np.nonzero(small))]
        out[field] = (simplex_hold(p, small),
                      [f"{listed(entries)} ({why}: a boundary EM only approaches)"])
    return out


def _held_start(params, held, chain, data) -> dict:
    """``initial.probs`` of one sequence with every initial concentration ``<= 1``."""
    if (isinstance(data, list) or np.any(np.asarray(chain["initial"]) > 1.0)
            or isinstance(held.get("initial_probs", (None,))[0], C.Fixed)):
        return {}
    probs = np.array2string(np.asarray(params.initial_probs), precision=3)
    return {"initial_probs": (C.Fixed(C.nested_tuple(params.initial_probs)), [
        f"initial.probs = {probs} (one sequence and initial_probs_concentration <= 1: the "
        "objective rises towards a vertex of the simplex, which EM only approaches)"])}


# --------------------------------------------------------------- stationary?
def _stationarity(acv_model, params, data, name) -> dict:
    """:func:`~approxcv.models.hmm._converted.newton_step` at dynamax's fit; an
    :class:`InexactFitWarning` that says what to call when it is not stationary."""
    check = newton_step(acv_model, params, data)
    if not check["stationary"]:
        why = (" (SphericalGaussianHMM's M-step is a few Adam steps, so its EM stops near, "
               "not at, a fixed point)" if name == "SphericalGaussianHMM" else "")
        warnings.warn(
            f"from_dynamax: dynamax's fit is not a stationary point of its objective (Newton "
            f"step {check['newton_step_norm']:.3g}, gradient norm {check['grad_norm']:.3g})"
            f"{why}, so approximate CV around it is inexact. Run dynamax's EM further from "
            "this fit (params, lps = model.fit_em(params, props, emissions, num_iters=500): "
            "until lps stops rising), or refit its objective in approxcv from it: acv_params "
            "= acv_model.fit(data, init_params=acv_params)", InexactFitWarning,
            stacklevel=user_stacklevel())
    return check


# ------------------------------------------------------------------- arrays
def _array(value, shape, name: str) -> np.ndarray:
    arr = np.asarray(value, dtype=np.float64)
    if arr.shape != shape:
        raise InvalidDataError(f"from_dynamax: {name} has shape {arr.shape}, expected "
                               f"{shape}; are params this model's, fitted?")
    if not np.all(np.isfinite(arr)):
        raise InvalidDataError(f"from_dynamax: {name} holds NaN or inf; refit the model")
    return arr


def _prior(value, shape, name: str, any_sign: bool = False) -> tuple:
    """dynamax's hyperparameter ``value`` broadcast to ``shape``, as nested tuples."""
    try:
        arr = np.broadcast_to(np.asarray(value, dtype=np.float64), shape)
    except (TypeError, ValueError) as exc:
        raise ArgumentTypeError(
            f"from_dynamax: the model's {name} (shape {np.shape(value)}) does not broadcast "
            f"to {shape}") from exc
    if not np.all(np.isfinite(arr)) or (not any_sign and np.any(arr <= 0)):
        raise InvalidArgumentError(f"from_dynamax: the model's {name} must be finite"
                                   + ("" if any_sign else " and > 0"))
    return C.nested_tuple(arr)
