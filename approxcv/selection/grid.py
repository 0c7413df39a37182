"""``select``: fit and cross-validate every point of a hyperparameter grid, then rank them;
the :class:`Selection` it returns (also :func:`approxcv.composite.select_policy`'s).

For each grid entry ``label -> hp`` the model ``model_factory(**hp)`` is built here (so a
factory that raises is reported with the entry's label before any work is sent), then one
task per entry fits it (``model.fit(data, **fit_kwargs)``) and runs
:func:`~approxcv.api.cross_validate` on the same folds. The tasks go through the executor
seam (:func:`~approxcv.executors.run_batches`): in process, on a process pool or on a Dask
``Client``, where each worker compiles each configuration once. The runs are ranked by
:func:`~approxcv.results.compare` (expected log predictive density, paired standard
errors of the differences).

An entry whose fit or cross-validation raises does not stop the grid: its exception (type
and message) is recorded in its row (``error``), the others are ranked, and a
:class:`~approxcv.errors.GridEntryWarning` names it; only a grid in which every entry failed
raises. Entries the ranking should not be trusted for are flagged (``flag``): a degenerate
fit (empty or coinciding states, a local optimum: demoted below every other entry), more
parameters than data units, a fit that did not converge, a Hessian that is not positive
definite at the fit.
"""
from __future__ import annotations

import dataclasses
import os
import re
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from ..errors import user_stacklevel
from ..api import _OPTION_NAMES, cross_validate
from .. import errors as _errors
from ..errors import (ApproxCVError, ArgumentTypeError, EmptyStateWarning, FitError,
                     GridEntryWarning, InvalidArgumentError, LocalOptimumWarning)
from ..executors import run_batches, to_numpy
from ..folds import as_folds
from ..models.base import check_model
from ..results import compare
from ..results.ranking import check_weights

__all__ = ["select", "Selection", "rank_entries", "warn_entries", "all_failed", "entry_flags",
           "EntryFailure"]


@dataclass
class Selection:
    """A ranking of candidate models by cross-validation: what :func:`select` (a grid of
    hyperparameters) and :func:`approxcv.composite.select_policy` (SCL policies) produce.

    Attributes:
        table: one row per entry (indexed by its label): the ranking of
            :func:`~approxcv.results.compare` (best first: ``rank``, ``elpd``,
            ``se``, ``elpd_diff``, ``dse``, ``weight`` (only with ``select(...,
            weights=)``), ``n_units``, ``n_unreliable``, ``warning``,
            ``method``; ``elpd`` is the expected log predictive density, higher is
            better), then ``n_params`` (free parameters of the fit), ``flag`` (why the
            entry's numbers should not be trusted, ``""`` if nothing: ``degenerate fit
            (...)`` when the fit warned of an empty state or a local optimum, or its states
            coincide — such entries are demoted below the others, without ``rank``, see
            :func:`rank_entries` —, ``over-parameterised`` when ``n_params >= n_units``,
            ``fit not converged``, ``Hessian not positive definite``) and ``error`` (``"Type in fit: message"`` or ``"Type in
            cross_validate: message"``, the exception that stopped a failed entry, ``""``
            otherwise; failed entries come last, without ``rank`` or
            ``elpd``), then the entry's own columns: one per hyperparameter (:func:`select`)
            or the policy's (:func:`~approxcv.composite.select_policy`: ``position``,
            ``cost``, ...). ``n_unreliable``
            counts the row's own unreliable folds; ``warning`` is set where the row rests
            on an unreliable fold of its own *or* where its unreliable folds differ from
            the best entry's (its ``elpd_diff`` and ``dse`` then touch the best entry's
            unreliable folds), so it can be set on a row with ``n_unreliable == 0``.
        results: ``{label: CVResult}`` of the entries that ran, in entry order.
        params: ``{label: fitted full-data parameters}`` of those entries.
        models: ``{label: model}`` (every entry; for a policy, its fitted ``SCLModel``, so
            only the entries that ran).
        hyperparameters: ``{label: dict}``, what tells the entries apart (every entry):
            the grid's hyperparameters, or ``{"policy": Policy}``.
        fit_seconds: ``{label: seconds of the full-data fit}`` of the entries that ran.
        failures: ``{label: "Type in stage: message"}`` of the entries whose fit or
            cross-validation raised.
        exact_results: ``{label: CVResult}`` of exact CV run as a check of the method
            (``select_policy(check=True)``), else empty.
    """
    table: pd.DataFrame
    results: dict
    params: dict
    models: dict
    hyperparameters: dict
    fit_seconds: dict
    failures: dict = dataclasses.field(default_factory=dict)
    exact_results: dict = dataclasses.field(default_factory=dict)

    @property
    def best(self) -> str:
        """The label of the top-ranked entry."""
        return str(self.table.index[0])

    def __repr__(self) -> str:
        return f"Selection(best={self.best!r}, entries={len(self.table)})\n{self.table}"


@dataclass(frozen=True)
class EntryFailure:
    """A grid entry whose ``stage`` (``"fit"`` or ``"cross_validate"``) raised: the
    exception's type name and message (picklable, so it comes back from any executor)."""
    stage: str
    error_type: str
    message: str

    def __str__(self) -> str:
        return f"{self.error_type} in {self.stage}: {self.message}"


class _FitAndValidate:
    """Picklable task: ``(model, checkpoint) -> (params, CVResult, fit seconds,
    fit converged, names of the fit's DEGENERATE_FIT_WARNINGS)`` for one grid entry, on the data and folds it carries; arrays in the
    outputs are NumPy. An exception of the fit or of the cross-validation is returned as an
    :class:`EntryFailure` (the other entries go on)."""

    def __init__(self, data, folds, method, fit_kwargs, cv_kwargs):
        self.data, self.folds, self.method = data, folds, method
        self.fit_kwargs, self.cv_kwargs = fit_kwargs, cv_kwargs

    def __call__(self, model, checkpoint):
        t = time.perf_counter()
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                params = model.fit(self.data, **self.fit_kwargs)
        except Exception as e:          # recorded in the entry's row
            return EntryFailure("fit", type(e).__name__, str(e))
        finally:
            for w in caught:            # the fit's warnings still reach the user
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        degenerate = [w.category.__name__ for w in caught
                      if issubclass(w.category, DEGENERATE_FIT_WARNINGS)]
        seconds = time.perf_counter() - t
        converged = _fit_converged(getattr(model, "fit_result_", None))
        extra = {} if checkpoint is None else {"checkpoint": checkpoint}
        try:
            res = cross_validate(model, self.data, self.folds, self.method, params=params,
                                 **self.cv_kwargs, **extra)
        except Exception as e:
            return EntryFailure("cross_validate", type(e).__name__, str(e))
        return (to_numpy(params), _numpy_result(res), seconds, converged,
                sorted(set(degenerate)))


def _fit_converged(record) -> bool:
    """Whether a model's ``fit_result_`` says its fit converged (``True`` when it says
    nothing; a per-start array: some start converged)."""
    if not isinstance(record, Mapping) or "converged" not in record:
        return True
    return bool(np.any(np.asarray(record["converged"])))


#: warnings of a fit that make it degenerate — an empty state, coinciding states, a local
#: optimum: the fit is not an estimate of the model, and its cross-validated elpd (often the
#: best of the grid: a state sitting on one observation fits it perfectly) must not rank it
DEGENERATE_FIT_WARNINGS = (EmptyStateWarning, LocalOptimumWarning)
#: the flag of a degenerate fit (such entries are demoted by :func:`rank_entries`)
DEGENERATE = "degenerate fit"


def entry_flags(res, converged: bool, degenerate=()) -> str:
    """Why an entry's numbers should not be trusted (``Selection.table``'s ``flag``);
    ``degenerate``: names of the fit's :data:`DEGENERATE_FIT_WARNINGS`."""
    d = res.diagnostics
    out = []
    if degenerate or d.get("fit_concerns"):
        said = list(degenerate) + list(d.get("fit_concerns") or {})
        out.append(f"{DEGENERATE} ({', '.join(dict.fromkeys(said))})")
    n_params, n_units = d.get("num_params"), int(res.folds.n)
    if n_params is not None and int(n_params) >= n_units:
        out.append(f"over-parameterised ({int(n_params)} parameters >= {n_units} units)")
    if not converged or bool(d.get("inexact_fit", False)):
        out.append("fit not converged")
    if d.get("hessian_pd") is False:
        out.append("Hessian not positive definite")
    return "; ".join(out)


def _numpy_result(res):
    """``res`` with its parameters and diagnostics as NumPy (results travel as NumPy)."""
    return dataclasses.replace(res, params=to_numpy(res.params),
                               diagnostics=to_numpy(res.diagnostics))


def grid_entries(grid) -> dict[str, dict]:
    """``{label: hyperparameters}`` from a mapping ``label -> dict`` or a sequence of
    dicts (labelled ``"k1=v1, k2=v2"``); raises on an empty grid, non-dict entries or
    repeated labels."""
    if isinstance(grid, Mapping):
        items = [(str(k), v) for k, v in grid.items()]
    elif isinstance(grid, Sequence) and not isinstance(grid, (str, bytes)):
        items = [(None, v) for v in grid]
    else:
        raise ArgumentTypeError("`grid` must be a mapping label -> hyperparameters or a list "
                                f"of hyperparameter dicts, got {type(grid).__name__}")
    if not items:
        raise InvalidArgumentError("`grid` is empty: give at least one hyperparameter setting")
    entries: dict[str, dict] = {}
    for i, (label, hp) in enumerate(items):
        if not isinstance(hp, Mapping):
            raise ArgumentTypeError(f"`grid` entry {label if label is not None else i!r} must "
                                    f"be a dict of hyperparameters, got {type(hp).__name__}")
        label = label if label is not None else ", ".join(f"{k}={v}" for k, v in hp.items())
        if label in entries:
            raise InvalidArgumentError(f"`grid` lists the entry {label!r} twice")
        entries[label] = dict(hp)
    return entries


def build_models(model_factory, entries: Mapping[str, dict]) -> dict:
    """``{label: model_factory(**hp)}``, each checked against the model protocol; a factory
    that raises is reported naming ``model_factory`` and the entry."""
    if not callable(model_factory):
        raise ArgumentTypeError(f"`model_factory` must be callable, got "
                                f"{type(model_factory).__name__}")
    models = {}
    for label, hp in entries.items():
        try:
            model = model_factory(**hp)
        except Exception as e:
            raise InvalidArgumentError(f"`model_factory` raised for grid entry {label!r} "
                                       f"({hp}): {type(e).__name__}: {e}") from e
        try:
            check_model(model)
        except TypeError as e:
            raise ArgumentTypeError(f"`model_factory` returned a non-model for grid entry "
                                    f"{label!r}: {e}") from e
        models[label] = model
    return models


def _check_folds(models: Mapping, data, folds, level, weights=None) -> None:
    """Every model reads ``data`` as the units ``folds`` were built for, and ``weights``
    (:func:`~approxcv.results.ranking.check_weights`) are defined on those folds."""
    check_weights(weights)
    for label, model in models.items():
        _, _, n_units = model.prepare(data, level)
        try:
            checked = as_folds(folds, n_units)
        except ValueError as e:
            raise type(e)(f"{e} (grid entry {label!r})") from e
    if weights is not None and models:
        check_weights(weights, [checked[i] for i in range(len(checked))])


def _checkpoints(root, labels) -> list:
    """One checkpoint directory per entry under ``root`` (a checkpoint is bound to one
    model configuration): ``<root>/<index>-<label with unsafe characters replaced>``."""
    if root is None:
        return [None] * len(labels)
    return [os.path.join(os.fspath(root), f"{i:03d}-" + re.sub(r"[^A-Za-z0-9._=-]+", "_", lab))
            for i, lab in enumerate(labels)]


def select(model_factory, grid, data, folds, method: str | None = None, *, executor=None,
           fit_kwargs: Mapping[str, Any] | None = None, progress: bool = True,
           weights: str | None = None, **cv_kwargs) -> Selection:
    """Fit and cross-validate ``model_factory(**hp)`` for every ``hp`` of ``grid``; rank them.

    Args:
        model_factory: callable building a model from keyword hyperparameters, e.g.
            ``acv.models.PoissonHMM`` or ``lambda n_states, lam: Ridge(lam)``.
        grid: ``{label: {name: value}}``, or a list of ``{name: value}`` (labelled
            ``"name=value, ..."``).
        data: the data every model is fitted to and cross-validated on.
        folds: the folds shared by every entry (so differences are paired).
        method: the CV method of :func:`~approxcv.api.cross_validate` (``"ij"``, ``"ns"``,
            ``"exact"``, ``"auto"``); ``None`` (the default): each model's own
            ``default_method``, as ``cross_validate`` (``"ns"``, ALOOCV, for regularised
            ERM; ``"ij"`` for the others).
        executor: where the entries run, one task each (``None``: in process, in grid
            order; a ``concurrent.futures`` executor or a Dask ``Client``). The
            cross-validation inside a task runs where the task runs; warnings raised on a
            worker stay in its log, while the table's ``warning`` column and each result's
            ``diagnostics["unreliable_folds"]`` come back.
        fit_kwargs: keyword arguments of ``model.fit(data, **fit_kwargs)``.
        progress: a progress bar over the entries.
        weights: model weights in the table (a ``weight`` column), as
            :func:`~approxcv.results.compare`'s ``weights``: ``"stacking"``,
            ``"pseudo-bma+"`` or ``"pseudo-bma"``; refused before any work on overlapping
            folds. Demoted and failed entries get no weight (NaN).
        **cv_kwargs: options of :func:`~approxcv.api.cross_validate` (``scheme``, ``level``,
            ``restarts``, ...); ``checkpoint`` is a directory holding one checkpoint per entry.

    Returns:
        :class:`Selection`: ``table`` (ranked, with ``n_params``, ``flag``, ``error`` and
        the hyperparameter columns appended; its ``warning`` column is also set on rows
        whose comparison with the best entry touches the best entry's unreliable folds,
        see :class:`Selection`), per-entry ``results``, ``params``, ``models``,
        ``failures``.

    Warns:
        GridEntryWarning: some entries failed (each one's exception is in its row's
            ``error`` and in ``failures``; the others are ranked) or are flagged
            (``flag``: over-parameterised, fit not converged, Hessian not positive definite).

    Raises:
        FitError: every entry failed (the message gives each one's exception); where
            all failed with one approxcv error class (e.g. an option ``cross_validate``
            refuses), that class.

    Example:
        >>> x = acv.datasets.load_calls(300)
        >>> sel = acv.select(acv.models.PoissonHMM, {"K=2": {"n_states": 2},
        ...                  "K=3": {"n_states": 3}}, x, acv.folds.iid(300, 0.1, 20))
        >>> sel.best, sel.table
    """
    if "params" in cv_kwargs:
        raise InvalidArgumentError("`params` cannot be given to select(): every entry is "
                                   "fitted by model.fit(data, **fit_kwargs)")
    unknown = sorted(set(cv_kwargs) - set(_OPTION_NAMES) - {"scheme", "level"})
    if unknown:         # before any work is sent
        raise ArgumentTypeError(f"select() got unknown option(s) {unknown}; options of "
                                f"cross_validate are {['scheme', 'level', *_OPTION_NAMES]}")
    if fit_kwargs is not None and not isinstance(fit_kwargs, Mapping):
        raise ArgumentTypeError(f"`fit_kwargs` must be a mapping, got {type(fit_kwargs).__name__}")
    entries = grid_entries(grid)
    models = build_models(model_factory, entries)
    _check_folds(models, data, folds, cv_kwargs.get("level"), weights)
    labels = list(entries)
    checkpoint = cv_kwargs.pop("checkpoint", None)
    fit_kwargs = dict(fit_kwargs or {})
    if cv_kwargs.get("level") is not None:          # fit at the level CV runs at
        fit_kwargs.setdefault("level", cv_kwargs["level"])
    task = _FitAndValidate(data, folds, method, fit_kwargs, {"progress": False, **cv_kwargs})
    batches = [(models[lab], ck) for lab, ck in zip(labels, _checkpoints(checkpoint, labels))]
    outs = run_batches(task, batches, executor, progress, desc="select")
    failures = {lab: str(out) for lab, out in zip(labels, outs) if isinstance(out, EntryFailure)}
    ran = {lab: out for lab, out in zip(labels, outs) if not isinstance(out, EntryFailure)}
    if not ran:
        raise all_failed(outs, failures)
    results = {lab: out[1] for lab, out in ran.items()}
    table = rank_entries(results, {lab: entry_flags(results[lab], ran[lab][3], ran[lab][4])
                                   for lab in ran}, failures, entries, weights=weights)
    warn_entries("select", failures, table)
    return Selection(table=table, results=results,
                     params={lab: out[0] for lab, out in ran.items()},
                     models=models, hyperparameters=entries,
                     fit_seconds={lab: out[2] for lab, out in ran.items()},
                     failures=failures)


def all_failed(outs, failures: Mapping, noun: str = "grid entry") -> Exception:
    """The error of a grid in which every entry failed: the entries' common approxcv error
    class where they share one (e.g. an option every ``cross_validate`` refused), else
    :class:`~approxcv.errors.FitError`; the message gives each entry's exception."""
    kinds = {out.error_type for out in outs}
    cls = getattr(_errors, kinds.pop(), None) if len(kinds) == 1 else None
    if not (isinstance(cls, type) and issubclass(cls, ApproxCVError)):
        cls = FitError
    return cls(f"every {noun} failed: " + "; ".join(
        f"{lab!r}: {msg}" for lab, msg in failures.items()))


def rank_entries(results: Mapping, flags: Mapping, failures: Mapping,
                 columns: Mapping, *, weights: str | None = None) -> pd.DataFrame:
    """The table of a :class:`Selection`: :func:`~approxcv.results.compare` of ``results``
    (``{label: CVResult}``, best first), then ``n_params``, ``flag`` (``flags[label]``),
    ``error`` (``failures[label]``, ``""`` for the entries that ran; failed entries come
    last, without ``rank`` or ``elpd``), then one column per key of ``columns`` (``{label:
    {name: value}}``, every entry; a name that is already a column is skipped).
    ``attrs`` are :func:`~approxcv.results.compare`'s. ``weights`` (``compare``'s) adds
    the ``weight`` column over the ranked entries; demoted and failed ones have NaN.

    Entries flagged as a degenerate fit (:data:`DEGENERATE`) are demoted where any entry is
    not: the others are ranked, and each demoted entry follows them without a ``rank``, its
    ``elpd``/``se`` its own and its ``elpd_diff``/``dse`` paired against the best ranked
    entry (negative where the degenerate fit scores higher)."""
    demoted = [lab for lab in results if flags.get(lab, "").startswith(DEGENERATE)]
    if demoted and len(demoted) < len(results):
        ranked = compare({lab: r for lab, r in results.items() if lab not in demoted},
                         weights=weights)
        ranked = pd.concat([ranked, _paired_rows(results, ranked.index[0], demoted)])
        ranked = ranked.astype({"rank": "Int64"})
    else:
        ranked = compare(dict(results), weights=weights)
    ranked["n_params"] = [int(results[lab].diagnostics.get("num_params", -1))
                          for lab in ranked.index]
    ranked["flag"] = [flags.get(lab, "") for lab in ranked.index]
    ranked["error"] = ""
    failed = pd.DataFrame({"flag": "", "error": list(failures.values())},
                          index=pd.Index(list(failures), name=ranked.index.name))
    if failures:        # the ranked rows keep their integer and boolean columns
        table = pd.concat([ranked, failed]).astype(
            {c: "Int64" for c in ("rank", "n_units", "n_unreliable", "n_params")}
            | {"warning": "boolean"})
    else:
        table = ranked
    extra = pd.DataFrame.from_dict(dict(columns), orient="index").reindex(table.index)
    table = table.join(extra.drop(columns=[c for c in extra.columns if c in table.columns]))
    table.attrs = dict(ranked.attrs)
    return table


def _paired_rows(results: Mapping, best: str, labels) -> pd.DataFrame:
    """Rows of :func:`~approxcv.results.compare`'s layout for ``labels``, each paired
    against the entry ``best`` (``elpd_diff = elpd_best - elpd``, signed), without rank."""
    rows = []
    for lab in labels:
        pair = compare({best: results[best], lab: results[lab]})
        row = pair.loc[[lab]].copy()
        row["elpd_diff"] = pair.loc[best, "elpd"] - pair.loc[lab, "elpd"]
        row["dse"] = pair["dse"].max()          # the pair's other row: its best's is 0
        row["rank"] = pd.NA
        rows.append(row)
    return pd.concat(rows)


def warn_entries(who: str, failures: Mapping, table: pd.DataFrame,
                 noun: str = "grid entries") -> None:
    """One :class:`~approxcv.errors.GridEntryWarning`, prefixed ``who``, naming the failed
    and the flagged entries (``noun``) of a :class:`Selection`'s table."""
    flagged = {lab: f for lab, f in table["flag"].items() if f}
    parts = [f"{len(failures)} of {len(table)} {noun} failed and are not ranked ("
             + "; ".join(f"{lab!r}: {msg}" for lab, msg in failures.items()) + ")"
             ] if failures else []
    if flagged:
        parts.append("flagged (see the table's `flag`): " + "; ".join(
            f"{lab!r}: {f}" for lab, f in flagged.items()))
    if parts:
        warnings.warn(f"{who}: " + ". ".join(parts), GridEntryWarning, stacklevel=user_stacklevel())
