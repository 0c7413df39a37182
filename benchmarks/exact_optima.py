"""Do exact refits find each fold's best optimum, and are the folds that do not flagged?

Cases: PoissonHMM(3) on the first 300 call volumes, GaussianHMM(3) on their logarithm;
contiguous folds (10 % out) and leave-future-out folds, about 30 folds per case. For every
fold the reference is an independent 20-start search on approxcv's own fold objective
(identity-scaled BFGS + Newton polish from 20 of the model's own starts, seed 7, lowest
converged objective), and the best known optimum is the lowest fold objective any run
reached (the search, the code before, the code after). A fold sits at a *worse optimum*
when its refit is more than ``WORSE_NATS`` above the best known one.

The fit is the best full-data optimum found (:func:`fitted`); the PoissonHMM cases are
repeated with ``model.fit`` as it is, a local optimum (``local_fit`` totals), where exact CV
also warns that refits beat the fit (``better_optimum_folds``).

Reported per case, for the code before (a checkout of ``--before`` run in a subprocess,
default the commit this work started from) and after (this checkout): folds at a worse
optimum, of them unflagged (target 0), flagged folds by cause, and flagged folds that are
really off (at a worse optimum). ``exact`` runs with its default restarts (2).

Usage: python benchmarks/exact_optima.py [--quick] [--before REV]
(writes benchmarks/results/exact_optima[_quick].json)
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))   # this checkout's approxcv unless told otherwise

#: the commit before cross-fold starts and the new flagging rule
BEFORE = "d887a23"
#: a fold's refit is at a worse optimum when its fold objective exceeds the best known by this
WORSE_NATS = 1e-3
ORACLE_STARTS, ORACLE_SEED = 20, 7


def cases(quick: bool):
    """``[(name, model, data, folds, best_fit)]``: ``best_fit`` False uses ``model.fit`` as
    it is (for PoissonHMM(3) on the calls a local optimum, 18.5 nats above the best)."""
    import approxcv as acv
    n = 150 if quick else 300
    x = acv.datasets.load_calls(n).astype(float)
    k = 4 if quick else 15
    schemes = {"contiguous": acv.folds.contiguous(n, 0.1, k, seed=0),
               "future": acv.folds.leave_future_out(n, np.linspace(n // 2, n - 5, k)
                                                    .astype(int))}
    models = {"PoissonHMM3": (acv.models.PoissonHMM(3, n_init=4, seed=0), x),
              "GaussianHMM3-log": (acv.models.GaussianHMM(3, n_init=4, seed=0), np.log(x))}
    if quick:
        models.pop("GaussianHMM3-log")
    out = [(f"{m}/{s}", model, data, folds, True) for m, (model, data) in models.items()
           for s, folds in schemes.items()]
    model, data = models["PoissonHMM3"]
    return out + [(f"PoissonHMM3-local-fit/{s}", model, data, folds, False)
                  for s, folds in schemes.items()]


def fitted(model, data, best: bool = True):
    """The best full-data optimum found: ``model.fit``, refitted from the lowest of
    ``ORACLE_STARTS`` BFGS runs from the model's own starts when those go lower (for
    PoissonHMM(3) on the calls they do, by 18.5 nats: a fold optimum lower than a local
    fit is out of reach of refits warm-started there, and exact CV says so by
    ``better_optimum_folds``; here the question is the folds of a best fit)."""
    import jax.numpy as jnp
    from approxcv.optim import batched_minimize
    from approxcv.problem import make_problem, model_starts
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        params = model.fit(data)
        if not best:
            return params
        problem = make_problem(model, data, params)
        ones = jnp.ones((ORACLE_STARTS, problem.n_units))
        starts = model_starts(model, problem.data, "within", ORACLE_STARTS, ORACLE_SEED)
        res = batched_minimize(problem.fun, problem.scale, 2000, 2, "bfgs",
                               problem.batch_rows)(jnp.asarray(starts), ones, problem.data)
        value = np.where(np.asarray(res.converged), np.asarray(res.value), np.inf)
        at_fit = float(problem.fun(problem.u_full, ones[0], problem.data))
        if value.min() < at_fit - WORSE_NATS:
            best = problem.unravel(np.asarray(res.u)[np.argmin(value)])
            params = model.fit(data, init_params=best)
    return params


def run_exact(quick: bool) -> dict:
    """Exact CV of every case with the approxcv on ``sys.path``: ``{case: {...}}``."""
    import approxcv as acv
    out = {}
    for name, model, data, folds, best in cases(quick):
        params = fitted(model, data, best)
        t = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            res = acv.cross_validate(model, data, folds, "exact", params=params,
                                     progress=False)
        d = res.diagnostics
        causes = d.get("unreliable_causes", {})
        out[name] = {"seconds": time.perf_counter() - t,
                     "objective": np.asarray(d["exact_objective"]).tolist(),
                     "fold_loss": np.asarray(res.fold_loss).tolist(),
                     "unreliable": np.isin(folds.ids, d["unreliable_folds"]).tolist(),
                     "causes": {c: np.isin(folds.ids, ids).tolist()
                                for c, ids in causes.items()},
                     "cross_starts": int(d.get("exact_cross_starts", 0)),
                     "better_optimum_folds": len(d.get("better_optimum_folds", []))}
    return out


def oracle(quick: bool) -> dict:
    """The independent 20-start search per fold: ``{case: {objective, fold_loss}}``."""
    import jax.numpy as jnp
    from approxcv.engine.heldout import heldout_losses
    from approxcv.optim import batched_minimize
    from approxcv.problem import make_problem, model_starts
    out = {}
    for name, model, data, folds, best in cases(quick):
        params = fitted(model, data, best)
        problem = make_problem(model, data, params)
        starts = model_starts(model, problem.data, "within", ORACLE_STARTS, ORACLE_SEED)
        solve = batched_minimize(problem.fun, problem.scale, 2000, 2, "bfgs", problem.batch_rows)
        t = time.perf_counter()
        best_u, best_f = [], []
        for i in range(len(folds)):
            w = np.ones((len(starts), problem.n_units))
            w[:, folds[i]] = 0.0
            res = solve(jnp.asarray(starts), jnp.asarray(w), problem.data)
            f = np.where(np.asarray(res.converged), np.asarray(res.value), np.inf)
            best_u.append(np.asarray(res.u)[np.argmin(f)])
            best_f.append(float(f.min()))
        loss = heldout_losses(problem, np.stack(best_u), folds.padded())[0]
        out[name] = {"objective": best_f, "fold_loss": np.asarray(loss).tolist(),
                     "seconds": time.perf_counter() - t}
    return out


def before_run(rev: str, quick: bool) -> dict:
    """:func:`run_exact` with the approxcv of commit ``rev`` (a ``git archive`` in a
    temporary directory, run in a subprocess)."""
    root = os.path.dirname(HERE)
    with tempfile.TemporaryDirectory() as tmp:
        archive = subprocess.run(["git", "-C", root, "archive", rev, "approxcv"],
                                 check=True, capture_output=True).stdout
        subprocess.run(["tar", "-x", "-C", tmp], input=archive, check=True)
        result = os.path.join(tmp, "out.json")
        env = {**os.environ, "PYTHONPATH": tmp}
        code = (f"import sys, json; sys.path.insert(0, {tmp!r}); "
                f"sys.path.insert(1, {HERE!r}); import approxcv; "
                f"assert approxcv.__file__.startswith({tmp!r}), approxcv.__file__; "
                f"import exact_optima as b; "
                f"json.dump(b.run_exact({quick}), open({result!r}, 'w'))")
        subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=tmp)
        with open(result) as f:
            return json.load(f)


def score(run: dict, best: np.ndarray, best_loss: np.ndarray) -> dict:
    """Folds at a worse optimum, flagged, and their overlap, for one run of one case."""
    objective = np.asarray(run["objective"])
    worse = objective > best + WORSE_NATS
    flagged = np.asarray(run["unreliable"])
    rel = np.abs(np.asarray(run["fold_loss"]) - best_loss) / np.abs(best_loss)
    return {"n_folds": int(len(objective)), "worse_optimum": int(worse.sum()),
            "worse_unflagged": int((worse & ~flagged).sum()),
            "flagged": int(flagged.sum()), "flagged_really_off": int((flagged & worse).sum()),
            "flagged_by_cause": {c: int(np.sum(m)) for c, m in run["causes"].items()},
            "worse_gap_nats": (objective - best)[worse].round(4).tolist(),
            "worse_loss_rel_err": rel[worse].round(4).tolist(),
            "cross_starts": run.get("cross_starts", 0),
            "better_optimum_folds": run["better_optimum_folds"], "seconds": run["seconds"]}


def main(quick: bool, rev: str) -> dict:
    import approxcv
    after = run_exact(quick)
    before = before_run(rev, quick)
    search = oracle(quick)
    out = {"approxcv": approxcv.__file__, "before_rev": rev, "worse_nats": WORSE_NATS,
           "oracle_starts": ORACLE_STARTS, "cases": {}}
    totals = {"best_fit": {"before": {}, "after": {}}, "local_fit": {"before": {}, "after": {}}}
    for name in after:
        total = totals["local_fit" if "local-fit" in name else "best_fit"]
        runs = {"before": before[name], "after": after[name]}
        objs = [search[name]["objective"]] + [r["objective"] for r in runs.values()]
        stacked = np.array(objs)
        best = stacked.min(0)
        losses = np.array([search[name]["fold_loss"]] + [r["fold_loss"] for r in runs.values()])
        best_loss = losses[np.argmin(stacked, 0), np.arange(stacked.shape[1])]
        cell = {k: score(r, best, best_loss) for k, r in runs.items()}
        cell["oracle_worse_than_best"] = int(np.sum(np.asarray(search[name]["objective"])
                                                    > best + WORSE_NATS))
        cell["oracle_seconds"] = search[name]["seconds"]
        out["cases"][name] = cell
        for k in runs:
            for key in ("n_folds", "worse_optimum", "worse_unflagged", "flagged",
                        "flagged_really_off"):
                total[k][key] = total[k].get(key, 0) + cell[k][key]
    out["totals"] = totals
    from _common import write_json
    path = write_json("exact_optima", quick, out)
    print(json.dumps(totals, indent=1))
    print("wrote", path + ".json")
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fast smoke run")
    parser.add_argument("--before", default=BEFORE, help="git revision of the 'before' code")
    args = parser.parse_args()
    main(args.quick, args.before)
