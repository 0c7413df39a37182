"""Choosing an SCL policy by approximate cross-validation (beyond the seed).

The seed chose ``(lambda, beta)`` by grids of refits with train/test splits. An SCL objective
is a weighted objective, so each candidate policy needs one fit and one IJ (or NS) call:
:func:`select_policy` ranks the policies by their approximate held-out negative
log-likelihood, the full likelihood of each left-out sample, ``-log p_theta_o(x_o)``,
evaluated at the fold's approximate parameters, whatever components trained them; with
``check=True`` exact CV ranks them too.
"""
from __future__ import annotations

import time
from collections import Counter
from collections.abc import Mapping

import numpy as np
import pandas as pd

from ..api import cross_validate
from ..errors import ArgumentTypeError, InvalidArgumentError
from .components import check_component_model
from .policy import Policy
from .estimator import fit

__all__ = ["select_policy"]


def select_policy(model, X, policies, folds, method: str = "ij", *, seed: int = 0,
                  prior_var: float | None = None, check: bool = False,
                  max_steps: int = 200) -> pd.DataFrame:
    """Rank ``policies`` (a list or a ``{name: Policy}`` dict) by approximate CV.

    ``seed``, ``prior_var`` and ``max_steps`` are passed to every fit (:func:`fit`). Every
    policy gives one row, whatever its name: a list's policies are named by
    :meth:`Policy.label` (which tells different policies apart), and a name given twice
    (the same policy listed twice) gets its position appended, ``" [i]"``.

    Returns:
        A DataFrame, best first, with per policy: ``policy`` (its name), ``position`` (its
        index in ``policies``), ``cv_loss`` (mean held-out negative log-likelihood per
        left-out sample, by ``method``), ``expected_cost`` (FLOPs of the SCL and its
        gradient), ``fit_seconds``, ``cv_seconds``, ``n_unreliable`` (folds the method did
        not vouch for), ``fit_converged`` (``False`` where the fit stopped early or the
        data do not bound some parameters: ``SCLModel.fit``) and, with ``check``,
        ``exact_loss``, ``exact_seconds``, ``exact_rank``. ``df.attrs["choice"]`` is the
        chosen policy's name and ``df.attrs["theta"]`` each policy's full-data estimate
        (by name), for evaluating the fits elsewhere (e.g. on a test set) without
        refitting.

    Raises:
        InvalidArgumentError: ``policies`` is empty.
        ArgumentTypeError: ``policies`` is not a list or dict of :class:`Policy`, or
            ``model`` is not a component model.
    """
    check_component_model(model)
    named = _named_policies(policies)
    rows, thetas = [], {}
    for position, (name, policy) in enumerate(named):
        f = fit(model, X, policy, seed=seed, prior_var=prior_var, max_steps=max_steps)
        thetas[name] = f.theta
        t = time.perf_counter()
        res = cross_validate(f.model, f.data, folds, method, params=f.params,
                                 progress=False, warn=False)
        row = {"policy": name, "position": position, "cv_loss": _per_sample(res),
               "expected_cost": f.expected_cost, "fit_seconds": f.seconds,
               "cv_seconds": time.perf_counter() - t,
               "n_unreliable": int(len(res.diagnostics.get("unreliable_folds", []))),
               "fit_converged": bool((f.model.fit_result_ or {}).get("converged", True))}
        if check:
            t = time.perf_counter()
            ex = cross_validate(f.model, f.data, folds, "exact", params=f.params,
                                    progress=False, warn=False, restarts=0)
            row.update(exact_loss=_per_sample(ex), exact_seconds=time.perf_counter() - t)
        rows.append(row)
    df = pd.DataFrame(rows).sort_values("cv_loss", kind="stable").reset_index(drop=True)
    if check:
        df["exact_rank"] = df["exact_loss"].rank(method="min").astype(int)
    df.attrs["choice"] = df["policy"].iloc[0]
    df.attrs["theta"] = thetas
    return df


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


def _per_sample(res) -> float:
    """Held-out negative log-likelihood per left-out sample over all folds."""
    return float(np.sum(res.fold_loss) / np.sum(res.folds.sizes))
