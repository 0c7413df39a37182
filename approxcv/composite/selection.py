"""Choosing an SCL policy by approximate cross-validation (beyond the seed).

The seed chose ``(lambda, beta)`` by grids of refits with train/test splits. An SCL objective
is a weighted objective, so each candidate policy needs one fit and one IJ (or NS) call:
:func:`select_policy` ranks the policies as :func:`approxcv.select` ranks models, by the
expected log predictive density of the left-out samples under the full likelihood,
``log p_theta_o(x_o)`` evaluated at the fold's approximate parameters (whatever components
trained them), with paired standard errors (:func:`approxcv.compare`); with ``check=True``
exact CV ranks them too.
"""
from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping

import pandas as pd

from ..api import cross_validate
from ..errors import ArgumentTypeError, InvalidArgumentError
from ..results import compare
from ..selection.grid import (EntryFailure, Selection, all_failed, entry_flags, rank_entries,
                              warn_entries)
from .components import check_component_model
from .policy import Policy
from .estimator import fit

__all__ = ["select_policy"]


def select_policy(model, X, policies, folds, method: str | None = None, *, seed: int = 0,
                  prior_var: float | None = None, check: bool = False,
                  max_steps: int = 200) -> Selection:
    """Rank ``policies`` (a list or a ``{name: Policy}`` dict) by approximate CV.

    Each policy is fitted once (:func:`~approxcv.composite.fit` with ``seed``,
    ``prior_var`` and ``max_steps``) and cross-validated on ``folds`` by ``method``
    (``None``, the default: the SCL model's own, ``"ij"``); the results are ranked by
    :func:`approxcv.compare`. Every policy gives one row, whatever its name: a list's
    policies are named by :meth:`Policy.label` (which tells different policies apart), and
    a name given twice (the same policy listed twice) gets its position appended,
    ``" [i]"``. A policy whose fit or cross-validation raises does not stop the others: its
    exception is in its row's ``error`` (as in :func:`approxcv.select`).

    Returns:
        :class:`~approxcv.selection.Selection`, as :func:`approxcv.select`'s: ``table``
        indexed by the policy's name, best first, with :func:`approxcv.compare`'s columns
        (``rank``, ``elpd`` = ``-sum`` of the held-out negative log-likelihoods of the
        left-out samples, higher is better, ``se``, ``elpd_diff``, ``dse`` the paired
        standard error of the difference to the best, ``n_units``, ``n_unreliable``,
        ``warning``, ``method``), then ``n_params``, ``flag`` (e.g. ``fit not
        converged``: the fit stopped early or the data do not bound some parameters,
        ``SCLModel.fit``), ``error``, and the policy's columns: ``position`` (its index in
        ``policies``), ``cost`` (expected FLOPs of the SCL and its gradient,
        :attr:`SCLFit.expected_cost`), ``fit_seconds``, ``cv_seconds``,
        ``fit_converged`` and, with ``check``, ``exact_elpd``, ``exact_rank`` (the rank
        exact CV gives, 0 the best, by :func:`approxcv.compare` of the exact results),
        ``exact_seconds``. ``best`` is the chosen policy's name; ``results``,
        ``params`` (``SCLParams``: ``params[name].theta`` is the full-data estimate, to
        evaluate it elsewhere without refitting), ``models`` (the fitted ``SCLModel``),
        ``hyperparameters`` (``{name: {"policy": Policy}}``), ``fit_seconds``,
        ``failures`` and, with ``check``, ``exact_results`` are keyed by name.

    Warns:
        GridEntryWarning: some policies failed or are flagged (``flag``).

    Raises:
        InvalidArgumentError: ``policies`` is empty.
        ArgumentTypeError: ``policies`` is not a list or dict of :class:`Policy`, or
            ``model`` is not a component model.
        FitError: every policy failed (the message gives each one's exception); where all
            failed with one approxcv error class (e.g. ``X`` is not valid data for
            ``model``: ``InvalidDataError``), that class.
    """
    check_component_model(model)
    named = _named_policies(policies)
    columns = {name: {"position": position} for position, (name, _) in enumerate(named)}
    fits, results, exact, flags, failures, outs = {}, {}, {}, {}, {}, []
    kw = dict(progress=False, warn=False)
    for name, policy in named:
        try:
            f = fit(model, X, policy, seed=seed, prior_var=prior_var, max_steps=max_steps)
        except Exception as e:          # recorded in the policy's row
            outs.append(EntryFailure("fit", type(e).__name__, str(e)))
            failures[name] = str(outs[-1])
            continue
        t = time.perf_counter()
        try:
            # on X itself (the model draws the same coefficients from its seed), so that
            # every policy's result records the same data and the ranking can check it
            res = cross_validate(f.model, X, folds, method, params=f.params, **kw)
        except Exception as e:
            outs.append(EntryFailure("cross_validate", type(e).__name__, str(e)))
            failures[name] = str(outs[-1])
            continue
        fits[name], results[name] = f, res
        columns[name].update(cost=f.expected_cost, fit_seconds=f.seconds,
                             cv_seconds=time.perf_counter() - t, fit_converged=f.converged)
        flags[name] = entry_flags(res, f.converged)
        if check:
            t = time.perf_counter()
            try:
                exact[name] = cross_validate(f.model, X, folds, "exact", params=f.params,
                                             restarts=0, **kw)
            except Exception as e:
                flags[name] = "; ".join(filter(None, [flags[name], f"exact check failed: "
                                                      f"{type(e).__name__}: {e}"]))
            columns[name]["exact_seconds"] = time.perf_counter() - t
    if not results:
        raise all_failed(outs, failures, noun="policy")
    if exact:
        ranked = compare(exact)
        for name in exact:
            columns[name].update(exact_elpd=float(ranked.loc[name, "elpd"]),
                                 exact_rank=int(ranked.loc[name, "rank"]))
    table = rank_entries(results, flags, failures, columns)
    if check:
        table = _exact_columns_last(table)
    warn_entries("select_policy", failures, table, noun="policies")
    return Selection(table=table, results=results,
                     params={name: f.params for name, f in fits.items()},
                     models={name: f.model for name, f in fits.items()},
                     hyperparameters={name: {"policy": p} for name, p in named},
                     fit_seconds={name: f.seconds for name, f in fits.items()},
                     failures=failures, exact_results=exact)


def _exact_columns_last(table: pd.DataFrame) -> pd.DataFrame:
    """``table`` with its ``exact_*`` columns (present or added as missing) at the end."""
    cols = ["exact_elpd", "exact_rank", "exact_seconds"]
    out = table.reindex(columns=[c for c in table.columns if c not in cols] + cols)
    out["exact_rank"] = out["exact_rank"].astype("Int64")
    out.attrs = dict(table.attrs)
    return out


def _named_policies(policies) -> list:
    """``[(name, Policy)]``, one per policy, names distinct (module function docstring)."""
    if isinstance(policies, Mapping):
        items = [(str(k), p) for k, p in policies.items()]
    elif isinstance(policies, (list, tuple)):
        items = [(None, p) for p in policies]
    else:
        raise ArgumentTypeError(f"`policies` must be a list of Policy or a dict name -> "
                                f"Policy, got {type(policies).__name__}")
    if not items:
        raise InvalidArgumentError("`policies` is empty: give at least one Policy to rank")
    for i, (name, p) in enumerate(items):
        if not isinstance(p, Policy):
            raise ArgumentTypeError(f"`policies[{name if name is not None else i!r}]` must be "
                                    f"an approxcv.composite.Policy, got {type(p).__name__}")
    names = [p.label() if name is None else name for name, p in items]
    counts = Counter(names)
    names = [f"{n} [{i}]" if counts[n] > 1 else n for i, n in enumerate(names)]
    return list(zip(names, (p for _, p in items)))
