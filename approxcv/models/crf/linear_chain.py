"""Linear-chain conditional random field on per-token feature vectors (structured-CV paper,
§5 and Appendix G).

For a sentence with features ``x (T, F)`` and labels ``y (T,)`` in ``{0, ..., K-1}``::

    s(y; theta) = start[y_1] + sum_t (x_t W + b)[y_t] + sum_{t>1} A[y_{t-1}, y_t] + stop[y_T]
    -log p(y | x; theta) = log Z(x; theta) - s(y; theta)

with parameters ``theta = (W (F, K), b (K,), A (K, K), start (K,), stop (K,))`` (``b``,
``start`` and ``stop`` optional) and a Gaussian prior ``theta ~ N(0, prior_variance I)``.
The kernels (forward algorithm, clamped passes, Viterbi) are in
:mod:`approxcv.inference.crf`.

Weighted objectives (the two levels of cross-validation):

* ``level="structure"`` (LSCV, seed Algorithm 3): one weight per sentence::

      F(theta, w) = sum_n w_n [log Z(x_n) - s(y_n)] + ||theta||^2 / (2 prior_variance)

  held-out loss of a left-out sentence: ``-log p(y_n | x_n)``.
* ``level="within"`` (LWCV, seed Algorithm 4, eq. 13): one weight per *label*, numbered
  sentence by sentence; a left-out label is marginalised by a clamped forward pass::

      F(theta, w) = sum_n [log Z(x_n) - log Z_c(x_n, y_n, w_n)] + ||theta||^2 / (2 prior_variance)

  where ``log Z_c`` sums over the label paths with label factors ``w_t [k = y_t] + (1 -
  w_t)`` (:func:`approxcv.inference.crf.clamp_factors`): all weights 1 give the ordinary
  CRF likelihood, all 0 give 0. Held-out losses: ``-log p(y_o | x, y_kept)`` per fold and
  ``-log p(y_t | x, y_kept)`` per left-out label, in the full model.

  The objective is not linear in a label's weight: for one label with conditional
  probability ``p = p(y_t | x, y_rest)``, ``d grad F / d w_t = -grad p / p^2`` at ``w = 1``
  while removing the label changes the gradient by ``grad log p = grad p / p``, so the IJ
  step overshoots by ``1 / p`` on labels the model finds unlikely. NS has no such bias; the
  engine's error estimate lists the IJ's folds where it matters.

Entries a model does not have (the features CRFsuite never created,
:func:`approxcv.models.from_crfsuite`) are held at 0 by ``free=`` (a mask per leaf): they
are not parameters (:class:`approxcv.models.constraints.PartlyZero`), so the unconstrained
vector ``u``, the gradient and the Hessian are those of the free entries only.

Sentences are sorted by length into buckets, each padded to its longest sentence and run
as one batched forward pass; the fewest buckets are made whose padding is at most
``max_padding`` times the tokens (:func:`bucket_lengths`; small corpora get one bucket).
"""
from __future__ import annotations

import warnings
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from ...errors import user_stacklevel
from ..._validate import check_positive, check_positive_int
from ...errors import (BadlyScaledDataError, ConvergenceWarning, FitError,
                       InvalidArgumentError, InvalidDataError)
from ...inference import crf
from ...fitting import single_run
from ...optim import batched_minimize
from .. import constraints as C
from ..base import Model, check_weights, left_out
from .data import CRFBucket, CRFData, bucket_lengths
from ..._runtime import jit
from ...problem import make_problem

__all__ = ["LinearChainCRF", "LinearChainCRFParams", "CRFData", "CRFBucket"]

LEVELS = ("structure", "within")
#: dense BFGS with a Newton polish up to this many parameters, L-BFGS above
DENSE_FIT_MAX_DIM = 600
#: largest |feature| under which a fit that does not converge only warns; above it the
#: scale is blamed (measured: features of N(0, 1) times 1e7 still fit, times 1e9 the fit
#: stops at an objective 2.5 times the optimum's, times 1e15 it never leaves the start)
LARGE_FEATURE = 1e4


class LinearChainCRFParams(NamedTuple):
    """``weights (F, K)``, ``bias (K,)``, ``transitions (K, K)``, ``start (K,)``,
    ``stop (K,)``; a disabled term has shape ``(0,)``."""
    weights: np.ndarray
    bias: np.ndarray
    transitions: np.ndarray
    start: np.ndarray
    stop: np.ndarray


class LinearChainCRF(Model):
    """Linear-chain CRF ``p(y | x)`` with unary scores linear in per-token features.

    Args:
        n_labels: number of labels ``K``.
        prior_variance: variance of the Gaussian prior on every parameter (the usual L2
            penalty ``||theta||^2 / (2 prior_variance)``; 10 is the common default of the
            CRF literature, Sutton and McCallum 2012, §5.1.1).
        bias: a per-label unary bias ``b``.
        start_stop: scores of the first and last label.
        max_steps: optimiser steps of the fit.
        max_padding: padding allowed when sentences are bucketed by length, as a fraction
            of the tokens (:func:`bucket_lengths`; each bucket compiles on its own).
        free: which entries are parameters: a :class:`LinearChainCRFParams` of boolean
            masks of the leaves' shapes (``True``: free; a leaf given as ``None`` is free
            everywhere), the others held at 0 (``None``: every entry free). It fixes the
            number of features ``F`` (the rows of ``free.weights``).

    Data: a list of ``(features (T, F), labels (T,))`` sentences (``T >= 1`` may differ),
    or a :class:`CRFData` from :meth:`prepare`. Default level ``"structure"``.
    """
    #: the prior variance (the L2 penalty) is an argument of the compiled programs
    #: (:attr:`approxcv.models.base.Model.numeric_hyperparameters`): ``select`` over it
    #: compiles the fit and the method once
    numeric_hyperparameters = ("prior_variance",)

    def __init__(self, n_labels: int, *, prior_variance: float = 10.0, bias: bool = True,
                 start_stop: bool = True, max_steps: int = 5000, max_padding: float = 0.5,
                 free=None):
        self.n_labels = check_positive_int("n_labels", n_labels, 2)
        self.prior_variance = check_positive("prior_variance", prior_variance)
        self.bias = bool(bias)
        self.start_stop = bool(start_stop)
        self.max_steps = check_positive_int("max_steps", max_steps)
        self.max_padding = float(max_padding)
        if not np.isfinite(self.max_padding) or self.max_padding < 0.0:
            raise InvalidArgumentError(f"`max_padding` must be >= 0, got {max_padding!r}")
        self.free = self._check_free(free)
        self.fit_result_: dict | None = None

    def _check_free(self, free):
        """``free`` as a :class:`LinearChainCRFParams` of nested tuples of bools (hashable;
        ``None`` for a leaf free everywhere), checked against the label count and the
        enabled terms."""
        if free is None:
            return None
        if not isinstance(free, LinearChainCRFParams):
            raise InvalidArgumentError(
                "`free` must be a LinearChainCRFParams of boolean masks (or None per leaf), "
                f"got {type(free).__name__}")
        k = self.n_labels
        shape_w = np.shape(free.weights)
        if free.weights is None or len(shape_w) != 2 or shape_w[1] != k:
            raise InvalidArgumentError(
                f"`free.weights` must be a boolean mask of shape (F, {k}) (it fixes the "
                f"number of features F), got shape {shape_w}")
        out = []
        for name, mask, shape in zip(LinearChainCRFParams._fields, free,
                                     self._shapes(shape_w[0])):
            if mask is None or shape == (0,):
                out.append(None)
                continue
            mask = np.asarray(mask)
            if mask.shape != shape or mask.dtype != bool:
                raise InvalidArgumentError(
                    f"`free.{name}` must be a boolean mask of shape {shape}, got "
                    f"{mask.dtype} of shape {mask.shape}")
            out.append(_bools(mask))
        return LinearChainCRFParams(*out)

    def __repr__(self) -> str:
        """The hyperparameters, with ``free`` as its count of free entries."""
        items = []
        for key, value in self.static_key():
            if key == "free" and value is not None:
                masks = [np.asarray(m, dtype=bool) for m in value if m is not None]
                value = (f"<{sum(int(m.sum()) for m in masks)} of "
                         f"{sum(m.size for m in masks)} masked entries free>")
            items.append(f"{key}={value!r}" if not isinstance(value, str) or key != "free"
                         else f"{key}={value}")
        return f"{type(self).__name__}({', '.join(items)})"

    # ----------------------------------------------------------------- data
    def prepare(self, data, level: str | None = None):
        """Validate ``data`` and return ``(CRFData, level, num_units)``.

        Raises:
            InvalidArgumentError: an unknown level, or ``data`` not a list of sentences.
            InvalidDataError: an empty sentence, non-finite or ragged features, labels out
                of range or of another length than the features.
        """
        level = "structure" if level is None else level
        if level not in LEVELS:
            raise InvalidArgumentError(f"`level` must be one of {LEVELS}, got {level!r}")
        if not isinstance(data, CRFData):
            data = self._prepare_sentences(data, self._free_width())
        elif self._free_width() not in (None, data.num_features):
            raise InvalidDataError(
                f"the data have {data.num_features} features per token, but `free` masks "
                f"{self._free_width()}: give every token the features the mask was made for")
        n = data.num_sentences if level == "structure" else data.num_tokens
        if level == "structure" and n < 2:
            raise InvalidArgumentError(
                f"level='structure' needs at least 2 sentences, got {n}")
        return data, level, n

    def _prepare_sentences(self, data, num_features: int | None = None,
                           name: str = "data") -> CRFData:
        """The one check of sentences (``fit``, ``cross_validate``, ``predict``): a
        non-empty list of ``(features (T, F), labels (T,))`` with one feature width ``F``
        — ``num_features`` when given (the width the parameters were fitted on) — then
        bucketed. ``name`` names the argument in messages."""
        if not isinstance(data, (list, tuple)) or not data:
            raise InvalidArgumentError(
                f"`{name}` must be a non-empty list of (features (T, F), labels (T,)) "
                "sentences")
        feats, labs = [], []
        for i, sent in enumerate(data):
            if not isinstance(sent, (list, tuple)) or len(sent) != 2:
                raise InvalidArgumentError(
                    f"{name}[{i}] must be a pair (features (T, F), labels (T,))")
            x, y = self._check_sentence(sent[0], sent[1], f"{name}[{i}]")
            if num_features is not None and x.shape[1] != num_features:
                raise InvalidDataError(
                    f"{name}[{i}] has {x.shape[1]} features per token, but the parameters "
                    f"were fitted on {num_features} (`params.weights` or the model's "
                    f"`free.weights` has {num_features} rows): give every token the feature "
                    "vector the model was fitted on")
            if feats and x.shape[1] != feats[0].shape[1]:
                raise InvalidDataError(
                    f"{name}[{i}] has {x.shape[1]} features per token, {name}[0] has "
                    f"{feats[0].shape[1]}: every token needs the same feature vector length")
            feats.append(x)
            labs.append(y)
        return self._bucketed(feats, labs)

    def _free_width(self) -> int | None:
        """The number of features ``free`` fixes (``None``: any)."""
        return None if self.free is None else len(self.free.weights)

    def _check_sentence(self, x, y, where):
        try:
            x = np.asarray(x, dtype=np.float64)
        except (TypeError, ValueError) as exc:
            raise InvalidDataError(f"{where} features are not numeric: {exc}") from None
        y_arr = np.asarray(y)
        if x.ndim != 2:
            raise InvalidDataError(f"{where} features must be (T, F), got shape {x.shape}")
        if x.shape[0] == 0:
            raise InvalidDataError(f"{where} is an empty sentence (no tokens)")
        if not np.all(np.isfinite(x)):
            raise InvalidDataError(f"{where} features contain NaN or inf")
        if y_arr.shape != (x.shape[0],):
            raise InvalidDataError(f"{where} labels must have shape ({x.shape[0]},) like "
                                   f"its features, got {y_arr.shape}")
        if not (np.issubdtype(y_arr.dtype, np.integer)
                or (np.issubdtype(y_arr.dtype, np.floating)
                    and np.all(np.isfinite(y_arr)) and np.all(y_arr == np.round(y_arr)))):
            raise InvalidDataError(f"{where} labels must be integers in [0, {self.n_labels})")
        y_arr = y_arr.astype(np.int64)
        if y_arr.min() < 0 or y_arr.max() >= self.n_labels:
            raise InvalidDataError(
                f"{where} labels must lie in [0, {self.n_labels}) (n_labels="
                f"{self.n_labels}), got values from {y_arr.min()} to {y_arr.max()}")
        return x, y_arr

    def _bucketed(self, feats, labs) -> CRFData:
        lengths = np.array([len(y) for y in labs])
        offsets = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        n_tokens = int(lengths.sum())
        bucket_of = bucket_lengths(lengths, self.max_padding)
        buckets = []
        for b in np.unique(bucket_of):
            idx = np.flatnonzero(bucket_of == b)
            t_b = int(lengths[idx].max())
            x = np.zeros((len(idx), t_b, feats[0].shape[1]))
            y = np.zeros((len(idx), t_b), dtype=np.int32)
            mask = np.zeros((len(idx), t_b))
            token = np.full((len(idx), t_b), n_tokens, dtype=np.int32)
            for r, i in enumerate(idx):
                x[r, :lengths[i]], y[r, :lengths[i]], mask[r, :lengths[i]] = feats[i], labs[i], 1
                token[r, :lengths[i]] = offsets[i] + np.arange(lengths[i])
            buckets.append(CRFBucket(jnp.asarray(x), jnp.asarray(y), jnp.asarray(mask),
                                     jnp.asarray(np.asarray(idx, np.int32)),
                                     jnp.asarray(token)))
        # int32 by NumPy: jnp.asarray(..., dtype=) compiles a conversion program
        return CRFData(tuple(buckets), jnp.asarray(np.asarray(lengths, np.int32)),
                       jnp.asarray(np.repeat(np.arange(len(lengths)), lengths).astype(np.int32)))

    def objective_scale(self, data: CRFData) -> float:
        """Number of labels (normalises optimiser tolerances)."""
        return float(data.num_tokens)

    # ----------------------------------------------------------- parameters
    def param_constraints(self):
        """Reals; a leaf with entries held at 0 (``free``) is
        :class:`~approxcv.models.constraints.PartlyZero`."""
        masks = self.free if self.free is not None else (None,) * 5
        return LinearChainCRFParams(*(C.Real() if m is None or all(np.ravel(m))
                                      else C.PartlyZero(m) for m in masks))

    def _free_masks(self, shapes):
        """Boolean mask of the free entries of every leaf of ``shapes``."""
        masks = self.free if self.free is not None else (None,) * 5
        return [np.ones(s, bool) if m is None else np.asarray(m, bool)
                for m, s in zip(masks, shapes)]

    def _shapes(self, num_features: int):
        k = self.n_labels
        return LinearChainCRFParams((num_features, k), (k if self.bias else 0,), (k, k),
                                    (k if self.start_stop else 0,),
                                    (k if self.start_stop else 0,))

    def init_params(self, data, level: str | None = None, n: int = 1, seed: int = 0) -> list:
        """``n`` starts: zeros (the objective is convex), then small random ones (0 where
        ``free`` holds an entry)."""
        data, _, _ = self.prepare(data, level)
        shapes = self._shapes(data.num_features)
        masks = self._free_masks(shapes)
        rng = np.random.default_rng(seed)
        return [LinearChainCRFParams(*(np.zeros(s) if i == 0 else
                                       np.where(m, 0.01 * rng.normal(size=s), 0.0)
                                       for s, m in zip(shapes, masks))) for i in range(n)]

    def log_prior(self, params):
        """``-||theta||^2 / (2 prior_variance)`` (constant dropped)."""
        sq = sum(jnp.sum(jnp.square(p)) for p in params)
        return -0.5 * sq / self.prior_variance

    def scores(self, params, features):
        """``(unary (..., T, K), transitions, start, stop)`` with zeros for disabled terms."""
        k = self.n_labels
        unary = features @ params.weights
        if self.bias:
            unary = unary + params.bias
        zeros = jnp.zeros(k, unary.dtype)
        start = params.start if self.start_stop else zeros
        stop = params.stop if self.start_stop else zeros
        return unary, params.transitions, start, stop

    # ------------------------------------------------------ objective & loss
    def objective(self, params, data, weights, scheme: str = "A", level: str | None = None):
        """Weighted negative log-likelihood plus the negative log prior (module docstring).

        ``scheme`` is ignored: labels are clamped or marginalised (the seed's scheme C).
        """
        data, level, n = self.prepare(data, level)
        weights = check_weights(weights, n)
        total = 0.0
        for bucket in data.buckets:
            unary, trans, start, stop = self.scores(params, bucket.features)
            log_z = jax.vmap(crf.log_partition, (0, None, None, None, 0))(
                unary, trans, start, stop, bucket.mask)
            if level == "structure":
                score = jax.vmap(crf.path_score, (0, None, None, None, 0, 0))(
                    unary, trans, start, stop, bucket.mask, bucket.labels)
                total = total + jnp.dot(weights[bucket.sentence], log_z - score)
            else:
                w_tok = _token_weights(weights, bucket.token)
                factors = jax.vmap(crf.clamp_factors, (0, 0, None))(
                    bucket.labels, w_tok, self.n_labels)
                log_zc = jax.vmap(crf.log_partition, (0, None, None, None, 0, 0))(
                    unary, trans, start, stop, bucket.mask, factors)
                total = total + jnp.sum(log_z - log_zc)
        return total - self.log_prior(params)

    def objective_splits(self, scheme: str, level: str) -> bool:
        """A sum of sentence (or label) log-losses plus the prior: always."""
        return True

    def heldout_loss(self, params, data, weights, level: str | None = None):
        """``(fold_loss, point_losses (n,))`` of the units with weight 0, in the full model.

        Structure: ``-log p(y_n | x_n)`` per left-out sentence. Within: ``-log p(y_o | x,
        y_kept)`` summed over sentences, and ``-log p(y_t | x, y_kept)`` per left-out label.
        """
        data, level, n = self.prepare(data, level)
        weights = check_weights(weights, n)
        out = left_out(weights)
        fold, points = 0.0, jnp.zeros(n, jnp.float64)
        for bucket in data.buckets:
            unary, trans, start, stop = self.scores(params, bucket.features)
            score = jax.vmap(crf.path_score, (0, None, None, None, 0, 0))(
                unary, trans, start, stop, bucket.mask, bucket.labels)
            if level == "structure":
                log_z = jax.vmap(crf.log_partition, (0, None, None, None, 0))(
                    unary, trans, start, stop, bucket.mask)
                loss = jnp.where(out[bucket.sentence], log_z - score, 0.0)
                fold = fold + jnp.sum(loss)
                points = points.at[bucket.sentence].set(loss)
                continue
            kept = 1.0 - _token_weights(out.astype(jnp.float64), bucket.token)
            factors = jax.vmap(crf.clamp_factors, (0, 0, None))(bucket.labels, kept,
                                                                self.n_labels)
            post = jax.vmap(crf.posterior, (0, None, None, None, 0, 0))(
                unary, trans, start, stop, bucket.mask, factors)
            any_left = jnp.any((kept == 0) & (bucket.mask > 0), axis=1)
            fold = fold + jnp.sum(jnp.where(any_left, post.log_normalizer - score, 0.0))
            p_label = jnp.take_along_axis(post.marginals, bucket.labels[..., None], -1)[..., 0]
            left = (kept == 0) & (bucket.mask > 0)
            loss = jnp.where(left, -jnp.log(jnp.where(left, p_label, 1.0)), 0.0)
            points = points.at[bucket.token].set(loss, mode="drop")
        return fold, points

    # ------------------------------------------------------------------ fit
    def fit(self, data, level: str | None = None):
        """Minimise the negative log posterior at unit weights from zero (convex).

        Dense BFGS with a Newton polish up to :data:`DENSE_FIT_MAX_DIM` parameters, L-BFGS
        above; the run is recorded in ``self.fit_result_``.

        Raises:
            BadlyScaledDataError: features so large that the objective's gradient
                overflows, or a fit that does not converge on features above
                :data:`LARGE_FEATURE` (the message says to standardise them).
            FitError: the objective or parameters are not finite.
        Warns:
            ConvergenceWarning: the optimiser stopped before its criterion was met.
        """
        data, level, n = self.prepare(data, level)
        largest = max(float(np.max(np.abs(np.asarray(b.features)))) for b in data.buckets)
        if largest > np.sqrt(np.finfo(np.float64).max / (data.num_tokens * self.n_labels)):
            raise BadlyScaledDataError(
                f"{type(self).__name__}.fit: features up to |x| = {largest:.3g} make the "
                "objective's gradient overflow; standardise the features (e.g. zero mean and "
                "unit variance per column) and fit again")
        p0 = self.init_params(data, level)[0]
        problem = make_problem(self, data, p0, level=level, checked=True)
        dim = int(problem.u_full.shape[0])
        dense = dim <= DENSE_FIT_MAX_DIM
        solve = batched_minimize(problem.fun, problem.scale, self.max_steps, 2 if dense else 0,
                                 "bfgs" if dense else "lbfgs")
        u, info = single_run(solve, problem.u_full, np.ones(n), problem.data)
        self.fit_result_ = info
        if not (np.isfinite(info["objective"]) and np.all(np.isfinite(u))):
            raise FitError(f"{type(self).__name__}.fit: the objective or parameters are not "
                           f"finite (objective {info['objective']})")
        if not info["converged"] and (largest > LARGE_FEATURE
                                      or not np.isfinite(info["grad_norm"])):
            raise BadlyScaledDataError(
                f"{type(self).__name__}.fit did not converge in {self.max_steps} steps "
                f"(gradient norm {info['grad_norm']:.3g}) on features up to |x| = "
                f"{largest:.3g}: the objective is too badly scaled for the optimiser; "
                "standardise the features (e.g. zero mean and unit variance per column) and "
                "fit again")
        if not info["converged"]:
            warnings.warn(f"{type(self).__name__}.fit did not converge in {self.max_steps} "
                          f"steps (gradient norm {info['grad_norm']:.3g})",
                          ConvergenceWarning, stacklevel=user_stacklevel())
        return LinearChainCRFParams(*(np.asarray(p) for p in problem.unravel(u)))

    def predict(self, params, features) -> list:
        """Viterbi labels of each sentence's ``features (T, F)`` (a list of arrays), batched
        by the same length buckets as the data.

        Raises:
            InvalidArgumentError: ``params`` with NaN or inf entries or the wrong shapes
                (:meth:`check_params`, as in ``cross_validate``); ``features`` not a list.
            InvalidDataError: a sentence whose feature width ``F`` is not the one the
                parameters were fitted on, or with NaN/inf features.
        """
        return self._per_sentence(params, features, _viterbi,
                                  lambda path: path[path >= 0])

    def predict_marginals(self, params, features) -> list:
        """Marginals ``p(y_t = k | x)`` of each sentence's ``features (T, F)``: a list of
        ``(T, K)`` arrays (forward-backward, :func:`approxcv.inference.crf.posterior`).

        Raises: as :meth:`predict`.
        """
        return self._per_sentence(params, features, _marginals, None)

    def _per_sentence(self, params, features, kernel, trim) -> list:
        """``kernel(unary, trans, start, stop, mask)`` on every length bucket of
        ``features``, its rows cut to each sentence's length (``trim`` or ``[:T]``)."""
        if not isinstance(features, (list, tuple)):
            raise InvalidArgumentError(
                "`features` must be a list of (T, F) arrays, one per sentence, got "
                f"{type(features).__name__}")
        weights = np.shape(params.weights)
        data = self._prepare_sentences(
            [(x, np.zeros(np.shape(x)[:1], dtype=int)) for x in features],
            weights[0] if len(weights) == 2 else None, "features")
        params = self.check_params(params, data, "within")
        lengths = np.asarray(data.lengths)
        out = [None] * data.num_sentences
        for bucket in data.buckets:
            unary, trans, start, stop = self.scores(params, bucket.features)
            rows = np.asarray(kernel(unary, trans, start, stop, bucket.mask))
            for row, i in enumerate(np.asarray(bucket.sentence)):
                out[i] = trim(rows[row]) if trim else rows[row][:lengths[i]]
        return out


@jit
def _viterbi(unary, trans, start, stop, mask):
    return jax.vmap(crf.viterbi, (0, None, None, None, 0))(unary, trans, start, stop, mask)


@jit
def _marginals(unary, trans, start, stop, mask):
    return jax.vmap(lambda *a: crf.posterior(*a).marginals, (0, None, None, None, 0))(
        unary, trans, start, stop, mask)


def _bools(mask: np.ndarray) -> tuple:
    """A boolean array as nested tuples of bools (hashable, exact)."""
    return tuple(_bools(m) for m in mask) if mask.ndim > 1 else tuple(bool(b) for b in mask)


def _token_weights(weights, token):
    """Weights of the labels at ``token (N_b, T_b)``; 1 on padding (index ``n``)."""
    return jnp.asarray(weights).at[token].get(mode="fill", fill_value=1.0)
