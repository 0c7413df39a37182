"""A fitted sklearn-crfsuite CRF as it is: :func:`from_crfsuite` ``-> (model, params, data)``.

The model is :class:`LinearChainCRF` with CRFsuite's objective — the L2-penalised
conditional log-likelihood of its first-order CRF (``algorithm="lbfgs"``, ``c1 = 0``)::

    sum_n [log Z(x_n) - s(y_n)] + c2 ||theta||^2,   prior_variance = 1 / (2 c2)

with no bias and no start/stop scores (CRFsuite has neither) — and ``params`` are
CRFsuite's fitted weights, read exactly (float64) from its model file; no refit. So the IJ
expands around CRFsuite's own fit, and ``method="exact"`` refits CRFsuite's objective.

**Features.** A token's item is turned into attributes as python-crfsuite does
(``pycrfsuite.ItemSequence``): ``{"k": float}`` is attribute ``k`` of that value (a bool
is 1 or 0), ``{"k": "v"}`` is attribute ``k:v`` of value 1, ``{"k": {...}}`` or
``{"k": [...]}`` prefixes the nested attributes with ``k:``, and a list of strings is
attributes of value 1; an attribute named twice in an item adds its values (CRFsuite
scores every occurrence). The attributes of the training data are the dense feature
columns ``x (T, F)``, in order of first appearance; labels are in ``crf.classes_`` order.

**Parameters CRFsuite does not have.** CRFsuite creates the state feature (attribute
``a``, label ``k``) only if ``a`` occurs on a token labelled ``k`` (with
``all_possible_states``: on any token) and the sum of ``a``'s values on the tokens
labelled ``k`` is at least ``min_freq`` (default 0; so a real-valued attribute whose
values there sum below 0 gets no feature), and the transition ``(j, k)`` only if it occurs
(with ``all_possible_transitions``: always) at least ``min_freq`` times (crfsuite's
``crf1d_feature.c``). The other entries of ``W`` and ``A`` are not parameters: they are
held at 0 (``LinearChainCRF(free=...)``), outside ``u``, the gradient and the Hessian.

**Stationary?** CRFsuite's L-BFGS stops when ``||g|| / max(1, ||w||) < epsilon``
(default 1e-5) or when the objective improved by less than ``delta`` (1e-5) over
``period`` (10) iterations, which can leave it short of the optimum. The Newton step of
the converted objective at CRFsuite's fit is measured (as ``from_hmmlearn`` does); where
it is not small an :class:`~approxcv.errors.InexactFitWarning` says what to call.
``model.fit_result_`` records the check and ``model.crfsuite_`` the vocabulary.
"""
from __future__ import annotations

import struct
import warnings

import numpy as np

from ...errors import (InexactFitWarning, InvalidArgumentError, InvalidDataError,
                       ProblemTooLargeError, UnfittedEstimatorError,
                       UnsupportedEstimatorError, user_stacklevel)
from ...engine.derivatives import full_derivatives
from ...engine.options import Options
from ...optim.pd import MAX_DENSE_DIM
from ...problem import make_problem
from .linear_chain import LinearChainCRF, LinearChainCRFParams

__all__ = ["from_crfsuite", "crfsuite_data", "crfsuite_items"]

#: the fit is stationary when the Newton step is below this times ``1 + ||u||`` (as
#: :data:`approxcv.models.hmm.hmmlearn.STATIONARY_RTOL`)
STATIONARY_RTOL = 1e-4
#: CRFsuite's defaults of the L-BFGS trainer (``pycrfsuite.Trainer().select("lbfgs")``)
LBFGS_DEFAULTS = {"c1": 0.0, "c2": 1.0, "epsilon": 1e-5, "delta": 1e-5, "period": 10,
                  "min_freq": 0.0}
#: stopping rules that take CRFsuite's L-BFGS to round-off (the InexactFitWarning's fix)
TIGHT_STOP = {"epsilon": 1e-10, "delta": 1e-12, "max_iterations": 10000}
#: feature types in CRFsuite's model file (``crf1d.h``)
_STATE, _TRANSITION = 0, 1
#: a feature record of CRFsuite's model file: type, source, destination, weight
_FEATURE = np.dtype([("type", "<u4"), ("src", "<u4"), ("dst", "<u4"), ("weight", "<f8")])


def from_crfsuite(crf, X, y, *, max_dim: int = MAX_DENSE_DIM):
    """``(model, params, data)``: a fitted ``sklearn_crfsuite.CRF`` as a
    :class:`LinearChainCRF`, CRFsuite's weights and the training data as dense sentences.

    Args:
        crf: a fitted ``sklearn_crfsuite.CRF`` with ``algorithm="lbfgs"`` (or the default)
            and ``c1 = 0`` (or the default): the L2-penalised objective.
        X, y: the data it was fitted to, as given to ``crf.fit`` (lists of per-token
            feature dicts or lists of strings; label sequences). They are needed: they
            give the attribute vocabulary, which features CRFsuite created, and the units
            of cross-validation.
        max_dim: largest dense layout ``F K + K^2`` accepted (default approxcv's dense
            Hessian limit, :data:`approxcv.optim.pd.MAX_DENSE_DIM`).

    Returns:
        ``(model, params, data)``: pass them to :func:`approxcv.cross_validate` (sentences
        are the units at ``level="structure"``, labels at ``"within"``), or use
        ``model.predict(params, [x for x, _ in data])`` and ``model.predict_marginals``.
        :func:`crfsuite_data` turns new sentences into ``model``'s features.

    Raises:
        UnfittedEstimatorError: ``crf`` has not been fitted.
        UnsupportedEstimatorError: not an ``sklearn_crfsuite.CRF``; another algorithm;
            ``c1 > 0`` (an L1 penalty: the objective is not smooth); ``c2 = 0``.
        InvalidDataError: ``X``, ``y`` are not the data ``crf`` was fitted to (a label or a
            feature of the model they do not have).
        ProblemTooLargeError: the dense layout ``F K + K^2`` exceeds ``max_dim``.
    Warns:
        InexactFitWarning: CRFsuite's fit is not a stationary point of its objective.
    """
    c2, min_freq = _check_estimator(crf)
    labels = tuple(str(k) for k in crf.classes_)
    items = [crfsuite_items(xseq, f"X[{i}]") for i, xseq in enumerate(X)]
    label_ids = _label_ids(y, items, labels)
    attributes = _vocabulary(items)
    k, f = len(labels), len(attributes)
    _check_size(f, k, sum(len(s) for s in items), max_dim)
    features = [_dense(seq, attributes) for seq in items]
    free = _created_features(items, attributes, label_ids, k, min_freq,
                             bool(crf.all_possible_states),
                             bool(crf.all_possible_transitions))
    weights, transitions, exact = _fitted_weights(crf, attributes, labels)
    _check_created(weights, transitions, free, attributes, labels)
    model = LinearChainCRF(k, prior_variance=1.0 / (2.0 * c2), bias=False, start_stop=False,
                           free=LinearChainCRFParams(free[0], None, free[1], None, None))
    params = LinearChainCRFParams(weights, np.zeros(0), transitions, np.zeros(0), np.zeros(0))
    data = list(zip(features, label_ids))
    model.crfsuite_ = {"attributes": tuple(attributes), "labels": labels}
    model.fit_result_ = {"source": "sklearn_crfsuite.CRF", "c2": c2, "min_freq": min_freq,
                         "weights_exact": exact, "free_state_features": int(free[0].sum()),
                         "free_transitions": int(free[1].sum()),
                         "dense_layout": f * k + k * k, "log": _log(crf)}
    model.fit_result_.update(_stationarity(model, params, data, crf))
    return model, params, data


def crfsuite_data(model, X, y=None) -> list:
    """Sentences ``X`` (and labels ``y``) in the features of a model from
    :func:`from_crfsuite`: ``[(features (T, F), labels (T,))]``, or the feature arrays
    alone when ``y`` is ``None`` (for ``model.predict``). Attributes outside the model's
    vocabulary are dropped, as CRFsuite's tagger ignores them.

    Raises:
        InvalidArgumentError: ``model`` does not come from :func:`from_crfsuite`.
        InvalidDataError: a label the model does not have.
    """
    vocab = getattr(model, "crfsuite_", None)
    if vocab is None:
        raise InvalidArgumentError("crfsuite_data needs a model made by from_crfsuite "
                                   "(its model.crfsuite_ holds the vocabulary)")
    index = {a: j for j, a in enumerate(vocab["attributes"])}
    items = [crfsuite_items(xseq, f"X[{i}]") for i, xseq in enumerate(X)]
    features = [_dense(seq, index) for seq in items]
    if y is None:
        return features
    return list(zip(features, _label_ids(y, items, vocab["labels"])))


# ------------------------------------------------------------------ estimator
def _check_estimator(crf):
    """``(c2, min_freq)`` of a fitted L-BFGS, L2-only ``sklearn_crfsuite.CRF``."""
    try:
        import sklearn_crfsuite
    except ImportError as exc:          # an optional dependency, imported when used
        raise ImportError("from_crfsuite needs sklearn-crfsuite: pip install "
                          "sklearn-crfsuite") from exc
    if not isinstance(crf, sklearn_crfsuite.CRF):
        raise UnsupportedEstimatorError(
            "from_crfsuite takes a fitted sklearn_crfsuite.CRF; got "
            f"{type(crf).__module__}.{type(crf).__name__}")
    algorithm = crf.algorithm if crf.algorithm is not None else "lbfgs"
    if algorithm != "lbfgs":
        raise UnsupportedEstimatorError(
            f"from_crfsuite: CRF(algorithm={algorithm!r}) minimises no smooth objective "
            "approxcv can expand around (only \"lbfgs\" does: the L2-penalised conditional "
            "log-likelihood); refit with algorithm=\"lbfgs\", c1=0")
    c1 = LBFGS_DEFAULTS["c1"] if crf.c1 is None else float(crf.c1)
    if c1 != 0.0:
        raise UnsupportedEstimatorError(
            f"from_crfsuite: CRF(c1={crf.c1!r}) adds an L1 penalty c1 ||w||_1, which is not "
            "smooth (its Hessian does not exist where weights are 0, and the IJ needs it); "
            "refit with c1=0 and an L2 penalty c2 > 0")
    c2 = LBFGS_DEFAULTS["c2"] if crf.c2 is None else float(crf.c2)
    if not np.isfinite(c2) or c2 <= 0.0:
        raise UnsupportedEstimatorError(
            f"from_crfsuite: CRF(c2={crf.c2!r}): without an L2 penalty the optimum may not "
            "exist (separable data) and the Hessian may be singular; refit with c2 > 0 "
            "(c2 = 1 / (2 prior_variance))")
    if getattr(crf, "tagger_", None) is None:
        raise UnfittedEstimatorError(
            "the sklearn_crfsuite.CRF is not fitted (it has no model file): call "
            "crf.fit(X, y) first")
    min_freq = LBFGS_DEFAULTS["min_freq"] if crf.min_freq is None else float(crf.min_freq)
    return c2, min_freq


def _log(crf) -> dict | None:
    """CRFsuite's training log: iterations, the last loss and ``||g||`` (error_norm)."""
    log = getattr(crf, "training_log_", None)
    if log is None or not getattr(log, "iterations", None):
        return None
    last = log.last_iteration
    return {"iterations": len(log.iterations), "loss": last.get("loss"),
            "error_norm": last.get("error_norm"),
            "max_iterations": crf.max_iterations, "epsilon": crf.epsilon,
            "delta": crf.delta, "period": crf.period}


# ------------------------------------------------------------------ features
def crfsuite_items(xseq, where: str = "X[i]") -> list:
    """A sequence's items as python-crfsuite makes them: a list (one per token) of
    ``[(attribute, value)]`` pairs, in order, duplicates kept (module docstring)."""
    try:
        import pycrfsuite
    except ImportError as exc:
        raise ImportError("from_crfsuite needs sklearn-crfsuite: pip install "
                          "sklearn-crfsuite") from exc
    if isinstance(xseq, pycrfsuite.ItemSequence):
        return [list(item.items()) for item in xseq.items()]
    if isinstance(xseq, (str, bytes, dict)) or not hasattr(xseq, "__iter__"):
        raise InvalidDataError(f"{where} must be a sequence of per-token items (dicts or "
                               f"lists of strings), got {type(xseq).__name__}")
    return [_item(x, f"{where}[{t}]") for t, x in enumerate(xseq)]


def _item(x, where: str) -> list:
    """One token's ``[(attribute, value)]`` (pycrfsuite's ``to_item``)."""
    out = []
    if not isinstance(x, dict):
        if isinstance(x, (str, bytes)) or not hasattr(x, "__iter__"):
            raise InvalidDataError(f"{where} must be a dict or a list of strings, got "
                                   f"{type(x).__name__}")
        for key in x:
            out.append((_text(key, where), 1.0))
        return out
    for key, value in x.items():
        key = _text(key, where)
        if isinstance(value, (dict, list, set)):
            out.extend((f"{key}:{a}", v) for a, v in _item(value, f"{where}[{key!r}]"))
        elif isinstance(value, (str, bytes)):
            out.append((f"{key}:{_text(value, where)}", 1.0))
        else:
            try:
                v = float(value)
            except (TypeError, ValueError):
                raise InvalidDataError(f"{where}[{key!r}] must be a number, a bool, a string, "
                                       f"a dict or a list, got {type(value).__name__}") from None
            if not np.isfinite(v):
                raise InvalidDataError(f"{where}[{key!r}] is {v}: attribute values must be "
                                       "finite")
            out.append((key, v))
    return out


def _text(key, where: str) -> str:
    if isinstance(key, bytes):
        return key.decode("utf-8")
    if not isinstance(key, str):
        raise InvalidDataError(f"{where}: attribute names must be strings, got "
                               f"{type(key).__name__} {key!r}")
    return key


def _vocabulary(items) -> dict:
    """``{attribute: column}`` in order of first appearance."""
    index = {}
    for seq in items:
        for item in seq:
            for a, _ in item:
                index.setdefault(a, len(index))
    return index


def _dense(seq, index) -> np.ndarray:
    """``x (T, F)``: each item's values summed by attribute column (unknown ones dropped)."""
    x = np.zeros((len(seq), len(index)))
    for t, item in enumerate(seq):
        for a, v in item:
            j = index.get(a)
            if j is not None:
                x[t, j] += v
    return x


def _label_ids(y, items, labels) -> list:
    """``y`` as integer arrays in ``labels`` order, checked against the items."""
    if len(y) != len(items):
        raise InvalidDataError(f"X has {len(items)} sequences but y has {len(y)}: pass the "
                               "data as given to crf.fit(X, y)")
    index = {lab: i for i, lab in enumerate(labels)}
    out = []
    for i, (yseq, seq) in enumerate(zip(y, items)):
        yseq = [str(lab) for lab in yseq]
        if len(yseq) != len(seq):
            raise InvalidDataError(f"y[{i}] has {len(yseq)} labels but X[{i}] has {len(seq)} "
                                   "items")
        unknown = sorted(set(yseq) - set(index))
        if unknown:
            raise InvalidDataError(
                f"y[{i}] has labels {unknown} that the CRF does not have (its classes_ are "
                f"{list(labels)}): pass the data as given to crf.fit(X, y)")
        out.append(np.array([index[lab] for lab in yseq], dtype=np.int64))
    return out


def _check_size(f: int, k: int, tokens: int, max_dim: int) -> None:
    dim = f * k + k * k
    if dim > max_dim:
        raise ProblemTooLargeError(
            f"from_crfsuite: {f} attributes x {k} labels make a dense layout of "
            f"F K + K^2 = {dim} weights (features {tokens} tokens x {f} = "
            f"{tokens * f * 8 / 2**20:.1f} MiB), above max_dim = {max_dim}, the size of "
            "approxcv's dense Hessian: fewer attributes (e.g. drop rare ones, or raise "
            "CRF(min_freq=)) or, if the memory and time allow, a larger max_dim")


def _created_features(items, index, label_ids, k, min_freq, all_states, all_transitions):
    """``(state (F, K), transitions (K, K))`` masks of the features CRFsuite created:
    touched (named on a token of that label, or connected by ``all_possible_*``) and of
    frequency (the attribute's values summed over those tokens; a transition's count) at
    least ``min_freq`` (crfsuite's ``crf1df_generate``)."""
    f = len(index)
    freq, named = np.zeros((f, k)), np.zeros((f, k), bool)
    tfreq = np.zeros((k, k))
    for seq, lab in zip(items, label_ids):
        for item, label in zip(seq, lab):
            for a, v in item:
                j = index[a]
                named[j, label] = True
                freq[j, label] += v
        np.add.at(tfreq, (lab[:-1], lab[1:]), 1.0)
    if all_states:
        named = np.broadcast_to(named.any(1, keepdims=True), named.shape)
    touched = tfreq > 0
    if all_transitions:
        touched = np.ones((k, k), bool)
    return named & (freq >= min_freq), touched & (tfreq >= min_freq)


# ------------------------------------------------------------------ weights
def _fitted_weights(crf, index, labels):
    """``(W (F, K), A (K, K), exact)``: CRFsuite's weights in float64 from its model file
    (``crf1d_model.c``: a ``FEAT`` chunk of (type, source, destination, weight) records,
    names by the model's own ids), checked against ``state_features_`` and
    ``transition_features_`` (printed to 6 decimals). Where the file cannot be read
    (``exact`` False) those 6-decimal values, with a warning."""
    info = crf.tagger_.info()
    lab = {int(i): name for name, i in info.labels.items()}
    att = {int(i): name for name, i in info.attributes.items()}
    col = {name: j for j, name in enumerate(labels)}
    k = len(labels)
    weights, transitions = np.zeros((len(index), k)), np.zeros((k, k))
    missing = sorted(a for a, _ in crf.state_features_ if a not in index)
    if missing:
        raise InvalidDataError(
            f"from_crfsuite: the CRF has state features of attributes {missing[:5]} "
            f"({len(missing)} in all) that X does not name: pass the data as given to "
            "crf.fit(X, y)")
    try:
        records = _feature_records(crf.modelfile.name)
    except (OSError, ValueError, AttributeError, TypeError) as exc:
        warnings.warn(
            f"from_crfsuite: CRFsuite's model file cannot be read ({exc}); its weights are "
            "taken from crf.state_features_, printed to 6 decimals, so the fit is off by up "
            "to 5e-7 a weight", InexactFitWarning, stacklevel=user_stacklevel())
        for (a, y), w in crf.state_features_.items():
            weights[index[a], col[y]] = w
        for (a, b), w in crf.transition_features_.items():
            transitions[col[a], col[b]] = w
        return weights, transitions, False
    for kind, src, dst, w in records:
        if kind == _STATE:
            weights[index[att[src]], col[lab[dst]]] = w
        elif kind == _TRANSITION:
            transitions[col[lab[src]], col[lab[dst]]] = w
    printed = ([(weights[index[a], col[y]], w) for (a, y), w in crf.state_features_.items()]
               + [(transitions[col[a], col[b]], w)
                  for (a, b), w in crf.transition_features_.items()])
    read = np.array(printed).reshape(-1, 2)
    if (len(read) != len(records) or len(read) and
            np.max(np.abs(read[:, 0] - read[:, 1])) > 1e-6 * (1 + np.max(np.abs(read[:, 1])))):
        raise InvalidDataError(
            "from_crfsuite: the weights read from CRFsuite's model file do not match "
            "crf.state_features_ / transition_features_; was the file replaced after the fit?")
    return weights, transitions, True


def _feature_records(path) -> list:
    """``[(type, source id, destination id, weight)]`` of a CRFsuite model file."""
    with open(path, "rb") as fh:
        buf = fh.read()
    magic, _, kind, _, _, _, _, off_features = struct.unpack_from("<4sI4s5I", buf, 0)
    if magic != b"lCRF" or kind != b"FOMC":
        raise ValueError(f"{path} is not a CRFsuite 1d model (magic {magic!r}, type {kind!r})")
    chunk, _, num = struct.unpack_from("<4sII", buf, off_features)
    if chunk != b"FEAT":
        raise ValueError(f"{path} has no feature chunk at offset {off_features}")
    rec = np.frombuffer(buf, dtype=_FEATURE, count=num, offset=off_features + 12)
    return [(int(r["type"]), int(r["src"]), int(r["dst"]), float(r["weight"])) for r in rec]


def _check_created(weights, transitions, free, index, labels) -> None:
    """Every nonzero weight of CRFsuite's is a feature the rule says it created: else
    ``X``, ``y`` are not its training data (or its rule differs)."""
    names = list(index)
    for what, w, mask in (("state feature", weights, free[0]),
                          ("transition", transitions, free[1])):
        bad = np.argwhere((w != 0) & ~mask)
        if len(bad):
            i, j = bad[0]
            name = (f"({names[i]!r}, {labels[j]!r})" if what == "state feature"
                    else f"({labels[i]!r}, {labels[j]!r})")
            raise InvalidDataError(
                f"from_crfsuite: the CRF has the {what} {name} ({len(bad)} such in all) "
                "that X, y cannot have created (never seen with that label, or below "
                "min_freq): pass the data as given to crf.fit(X, y)")


# --------------------------------------------------------------- stationary?
def _stationarity(model, params, data, crf) -> dict:
    """The Newton step ``||H^{-1} g||`` of CRFsuite's objective at its fit (free entries);
    an :class:`InexactFitWarning` that says what to call when it is not stationary."""
    problem = make_problem(model, data, params, level="structure")
    u = np.asarray(problem.u_full)
    # the IJ's own program (the fit's Newton polish): compiled once for both
    grad, hess, _ = full_derivatives(problem, Options(level="structure", progress=False),
                                     with_jacobian=False)
    grad, hess = np.asarray(grad), np.asarray(hess)
    step = np.linalg.solve(hess, grad)
    grad_norm, step_norm = float(np.linalg.norm(grad)), float(np.linalg.norm(step))
    stationary = step_norm <= STATIONARY_RTOL * (1.0 + float(np.linalg.norm(u)))
    if not stationary:
        log = _log(crf)
        ran = "" if log is None else (
            f" (CRFsuite ran {log['iterations']} L-BFGS iterations with epsilon="
            f"{log['epsilon'] if log['epsilon'] is not None else LBFGS_DEFAULTS['epsilon']}"
            f", delta={log['delta'] if log['delta'] is not None else LBFGS_DEFAULTS['delta']}"
            f", max_iterations={log['max_iterations']})")
        tight = ", ".join(f"{k}={v:g}" for k, v in TIGHT_STOP.items())
        warnings.warn(
            f"from_crfsuite: CRFsuite's fit is not a stationary point of its objective "
            f"(Newton step {step_norm:.3g}, gradient norm {grad_norm:.3g}){ran}, so "
            f"approximate CV around it is inexact. Refit CRFsuite to convergence "
            f"(sklearn_crfsuite.CRF(..., {tight})), or refit its objective in approxcv: "
            "params = model.fit(data)", InexactFitWarning, stacklevel=user_stacklevel())
    return {"grad_norm": grad_norm, "newton_step_norm": step_norm,
            "stationary": bool(stationary)}
