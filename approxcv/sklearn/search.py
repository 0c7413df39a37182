"""``ALOSearchCV``: a grid search whose candidates are scored by approximate leave-one-out
(:func:`~approxcv.sklearn.score.alo_score`) instead of refits per fold.

scikit-learn's ``GridSearchCV`` refits every candidate on every training split and scores it
on the test split; neither its ``cv=`` (which yields index splits) nor its ``scoring=`` (which
sees one fitted model and one test split) can carry a leave-one-out estimate from one fit.
So the approximate search is a meta-estimator of its own with ``GridSearchCV``'s interface
(``param_grid``, ``scoring``, ``cv``, ``refit``, ``n_jobs``, ``verbose``; ``best_params_``,
``best_score_``, ``best_estimator_``, ``cv_results_`` with ``GridSearchCV``'s keys,
``predict``/``score`` of the refitted best), usable wherever ``GridSearchCV`` is — inside
a ``Pipeline``, or wrapping one (``"step__param"`` names).

Every candidate is checked before any is scored (its hyperparameters in scikit-learn's
ranges, its ``scoring`` supported), so a bad one is refused naming it instead of being
ranked.
"""
from __future__ import annotations

import sys
import time

import numpy as np
from scipy.stats import rankdata
from sklearn.base import BaseEstimator, MetaEstimatorMixin, clone
from sklearn.model_selection import ParameterGrid
from sklearn.utils.validation import check_is_fitted

from ..errors import ArgumentTypeError, InvalidArgumentError
from ._checks import check_cv, check_hyperparameters, n_samples, resolve_folds
from ._scoring import check_scoring, split_scores, weighted_mean_std
from .score import run_alo

__all__ = ["ALOSearchCV"]


def _check_n_jobs(n_jobs):
    """``None`` or a non-zero integer (scikit-learn's convention: ``-1`` all processors)."""
    if n_jobs is None:
        return None
    if isinstance(n_jobs, (bool, np.bool_)) or not isinstance(n_jobs, (int, np.integer)) \
            or n_jobs == 0:
        raise InvalidArgumentError(f"`n_jobs` must be None or a non-zero integer (-1: all "
                                   f"processors), got {n_jobs!r}")
    return int(n_jobs)


def _check_verbose(verbose) -> int:
    """An integer ``>= 0`` (``True``/``False`` count as 1/0)."""
    if not isinstance(verbose, (int, np.integer)) or verbose < 0:
        raise InvalidArgumentError(f"`verbose` must be an integer >= 0, got {verbose!r}")
    return int(verbose)


def _check_candidates(estimator, candidates, scoring):
    """Each candidate's estimator (``estimator`` with its parameters set), after checking
    its hyperparameters and ``scoring``; a bad candidate is refused naming it and its
    index in the grid."""
    out = []
    for i, params in enumerate(candidates):
        try:
            est = clone(estimator).set_params(**params)
            check_scoring(scoring, check_hyperparameters(est))
        except (InvalidArgumentError, ArgumentTypeError) as exc:
            raise type(exc)(f"ALOSearchCV: candidate {i} of param_grid, {params!r}, cannot be "
                            f"scored: {exc}") from None
        out.append(est)
    return out


def _say(verbose: int, level: int, text: str):
    """Print ``text`` on standard output when ``verbose >= level`` (as ``GridSearchCV``)."""
    if verbose >= level:
        print(text, file=sys.stdout, flush=True)


def _rank(scores) -> np.ndarray:
    """``GridSearchCV``'s ``rank_test_score``: 1 for the best, ties share the lowest rank
    (``method="min"``), NaN scores last."""
    scores = np.asarray(scores, np.float64)
    finite = scores[np.isfinite(scores)]
    worst = (finite.min() - 1.0) if finite.size else 0.0
    return rankdata(-np.where(np.isnan(scores), worst, scores), method="min").astype(np.int32)


class ALOSearchCV(MetaEstimatorMixin, BaseEstimator):
    """Exhaustive search over ``param_grid`` scored by approximate CV.

    Args:
        estimator: a supported scikit-learn linear model or a ``Pipeline`` ending in one
            (:func:`~approxcv.sklearn.alo_score`).
        param_grid: dict or list of dicts, as ``GridSearchCV``.
        scoring: ``None`` (the final estimator's own loss, negated: ``-`` squared error for
            ``Ridge``/``ElasticNet``, ``-`` log-loss, ``-`` Poisson NLL) or a scikit-learn
            scorer name that is a mean of per-sample losses of the held-out prediction:
            ``"neg_mean_squared_error"``, ``"neg_mean_absolute_error"`` (regressors),
            ``"neg_mean_poisson_deviance"`` (``PoissonRegressor``), ``"neg_log_loss"``,
            ``"neg_brier_score"``, ``"accuracy"`` (``LogisticRegression``). Others
            (``"r2"``, callables, several metrics) need a fitted model per split and raise
            :class:`~approxcv.errors.InvalidArgumentError`.
        cv: ``None`` or ``"loo"`` (leave-one-out) or any ``cv`` of :func:`alo_score`; the
            folds are drawn once and shared by every candidate.
        refit: refit the best candidate on all data (``best_estimator_``).
        n_jobs: accepted for ``GridSearchCV``'s interface and recorded (``None`` or a
            non-zero integer), but the candidates are scored one after another in this
            process: each candidate's penalty is an argument of the same compiled programs,
            which parallel workers would each have to compile again.
        verbose: ``0`` silent; ``1`` a line for the search; ``2`` and more a line per
            candidate (its score and seconds), on standard output as ``GridSearchCV``.

    Attributes:
        cv_results_: dict of arrays, ``GridSearchCV``'s keys: ``params``, ``param_<name>``
            (masked arrays), ``split<k>_test_score`` (each split's score: for
            leave-one-out a split is one sample, so the ``n`` splits are the samples'
            scores), ``mean_test_score`` (the mean over all held-out samples, sample-weighted:
            the splits' scores averaged with the splits' weights, which for leave-one-out and
            equal folds without ``sample_weight`` is ``GridSearchCV``'s plain mean),
            ``std_test_score`` (their standard deviation with those weights; for
            leave-one-out: across the samples' scores), ``rank_test_score``,
            ``mean_fit_time`` (the pipeline's steps and the one full-data fit),
            ``std_fit_time`` (0: one fit per candidate), ``mean_score_time`` (ALOOCV of all
            folds and the scoring), ``std_score_time`` (0); and ``n_unreliable`` (samples or
            folds ALOOCV cannot vouch for). best_index_, best_params_, best_score_,
            best_estimator_ and refit_time_ (when ``refit``), best_alo_ (the best's
            :class:`~approxcv.sklearn.score.ALOScore`), n_splits_, scorer_ (the scoring
            name, ``None`` for the estimator's own loss).
    """

    def __init__(self, estimator, param_grid, *, scoring=None, cv=None, refit=True,
                 n_jobs=None, verbose=0):
        self.estimator = estimator
        self.param_grid = param_grid
        self.scoring = scoring
        self.cv = cv
        self.refit = refit
        self.n_jobs = n_jobs
        self.verbose = verbose

    def fit(self, X, y, sample_weight=None):
        """Score every candidate by :func:`alo_score`, then refit the best; returns self."""
        _check_n_jobs(self.n_jobs)
        verbose = _check_verbose(self.verbose)
        cv = check_cv(self.cv)
        candidates = list(ParameterGrid(self.param_grid))
        estimators = _check_candidates(self.estimator, candidates, self.scoring)
        folds = resolve_folds(cv, X, y, n_samples(X))
        _say(verbose, 1, f"ALOSearchCV: {len(folds)} folds for each of {len(candidates)} "
                         "candidates, one full-data fit each")
        runs = []
        for i, (params, est) in enumerate(zip(candidates, estimators)):
            run = run_alo(est, X, y, folds, sample_weight)
            runs.append(run)
            if verbose >= 2:
                mean = weighted_mean_std(*self._split_scores(run))[0]
                _say(verbose, 2, f"[ALOSearchCV {i + 1}/{len(candidates)}] {params}: score="
                                 f"{mean:.6g} ({run.fit_seconds + run.score_seconds:.3f} s)")
        self.cv_results_ = self._results(candidates, runs)
        scores = self.cv_results_["mean_test_score"]
        self.best_index_ = int(np.argmin(self.cv_results_["rank_test_score"]))
        self.best_params_ = candidates[self.best_index_]
        self.best_score_ = float(scores[self.best_index_])
        self.best_alo_ = runs[self.best_index_].score
        self.n_splits_ = len(folds)
        self.scorer_ = self.scoring
        if self.refit:
            t = time.perf_counter()
            best = clone(self.estimator).set_params(**self.best_params_)
            kw = {} if sample_weight is None else {"sample_weight": sample_weight}
            self.best_estimator_ = best.fit(X, y, **kw)
            self.refit_time_ = time.perf_counter() - t
        return self

    def _split_scores(self, run):
        """``(scores, weights)`` of ``run``'s splits under ``scoring``."""
        weights = np.array([float(np.sum(w)) for w in run.fold_weight])
        if self.scoring is None:
            with np.errstate(divide="ignore", invalid="ignore"):
                return -run.fold_loss / weights, weights
        return split_scores(self.scoring, run.kind, run.fold_eta, run.fold_y,
                            run.fold_weight), weights

    def _results(self, candidates, runs) -> dict:
        """``cv_results_`` with ``GridSearchCV``'s keys (class docstring)."""
        splits, means, stds = [], [], []
        for run in runs:
            scores, weights = self._split_scores(run)
            mean, std = weighted_mean_std(scores, weights)
            splits.append(scores)
            means.append(mean)
            stds.append(std)
        splits = np.asarray(splits, np.float64)
        fit = np.array([r.fit_seconds for r in runs])
        score = np.array([r.score_seconds for r in runs])
        results = {"mean_fit_time": fit, "std_fit_time": np.zeros_like(fit),
                   "mean_score_time": score, "std_score_time": np.zeros_like(score)}
        for name in sorted({k for p in candidates for k in p}):
            results[f"param_{name}"] = np.ma.masked_array(
                [p.get(name) for p in candidates], mask=[name not in p for p in candidates],
                dtype=object)
        results["params"] = candidates
        for k in range(splits.shape[1]):
            results[f"split{k}_test_score"] = splits[:, k]
        results["mean_test_score"] = np.asarray(means)
        results["std_test_score"] = np.asarray(stds)
        results["rank_test_score"] = _rank(means)
        results["n_unreliable"] = np.array([r.score.n_unreliable for r in runs])
        return results

    def _best(self):
        check_is_fitted(self, "best_estimator_")
        return self.best_estimator_

    def predict(self, X):
        """``best_estimator_.predict(X)``."""
        return self._best().predict(X)

    def predict_proba(self, X):
        """``best_estimator_.predict_proba(X)``."""
        return self._best().predict_proba(X)

    def decision_function(self, X):
        """``best_estimator_.decision_function(X)``."""
        return self._best().decision_function(X)

    def score(self, X, y, sample_weight=None):
        """``best_estimator_.score(X, y)``."""
        return self._best().score(X, y, sample_weight=sample_weight)
