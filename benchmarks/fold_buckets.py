"""What padding fold counts to buckets saves and costs (``approxcv.engine.fold_buckets``).

The README example (PoissonHMM(2) on 2,000 calls) cross-validated by IJ on 200 i.i.d.
folds, then on 210, 220 and 250 folds of the same data, each call timed with its compiled
programs counted: in a fresh process with bucketing (200, 210 and 220 folds run as 224, 250
as 256, a new bucket) and in another with it switched off (each count its own programs).
Each process has its own empty compilation cache. Then, warm, the price of the padding: the
IJ on 200 folds bucketed against unbucketed, in one process (minimum of 5 calls each,
interleaved).

    python benchmarks/fold_buckets.py          # writes results/fold_buckets.json
"""
from __future__ import annotations

import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _common import child_json, compile_counter, write_json  # noqa: E402
COUNTS = (200, 210, 220, 250)


def _setup(bucketing: bool):
    import approxcv as acv
    from approxcv import api
    compiles = compile_counter()
    if not bucketing:
        api._run_folds = lambda method, model, problem, folds, opts: folds
    x = acv.datasets.load_calls(2000)
    model = acv.models.PoissonHMM(n_states=2)
    return acv, x, model, model.fit(x), compiles


def child(bucketing: bool) -> dict:
    """Calls at every count of :data:`COUNTS` in this (fresh) process."""
    acv, x, model, params, compiles = _setup(bucketing)
    out = []
    for n_folds in COUNTS:
        folds = acv.folds.iid(len(x), frac=0.1, n_folds=n_folds, seed=0)
        before, t = compiles[0], time.perf_counter()
        acv.cross_validate(model, x, folds, "ij", params=params, progress=False, warn=False)
        out.append({"n_folds": n_folds, "seconds": time.perf_counter() - t,
                    "compiles": compiles[0] - before})
    return {"bucketing": bucketing, "calls": out}


def padding_cost(rounds: int = 5) -> dict:
    """Warm IJ on 200 folds, bucketed (224 run) and not, in this process."""
    from approxcv import api
    acv, x, model, params, _ = _setup(True)
    folds = acv.folds.iid(len(x), frac=0.1, n_folds=COUNTS[0], seed=0)
    bucketed_runs, plain = api._run_folds, (lambda method, model, problem, folds, opts: folds)
    times = {"bucketed": [], "unbucketed": []}
    for _ in range(rounds + 1):                 # the first round compiles: dropped
        for name, fn in (("bucketed", bucketed_runs), ("unbucketed", plain)):
            api._run_folds = fn
            t = time.perf_counter()
            acv.cross_validate(model, x, folds, "ij", params=params, progress=False,
                               warn=False)
            times[name].append(time.perf_counter() - t)
    best = {k: min(v[1:]) for k, v in times.items()}
    return {"warm_seconds": best, "bucketed_over_unbucketed": best["bucketed"]
            / best["unbucketed"]}


def in_fresh_process(arg: str) -> dict:
    return child_json(__file__, arg)


def main() -> dict:
    runs = {"on": in_fresh_process("--child-on"), "off": in_fresh_process("--child-off")}
    return {"problem": "PoissonHMM(2), load_calls(2000), IJ on iid folds (frac 0.1)",
            "counts": list(COUNTS), "bucketing_on": runs["on"], "bucketing_off": runs["off"],
            # the calls after the first: what another fold count costs
            "later_calls_seconds": {k: sum(c["seconds"] for c in r["calls"][1:])
                                    for k, r in runs.items()},
            "later_calls_compiles": {k: sum(c["compiles"] for c in r["calls"][1:])
                                     for k, r in runs.items()},
            "padding_cost": in_fresh_process("--cost")}


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1].startswith("--child"):
        print(json.dumps(child(sys.argv[1] == "--child-on")))
    elif len(sys.argv) > 1 and sys.argv[1] == "--cost":
        print(json.dumps(padding_cost()))
    else:
        result = main()
        print(json.dumps({k: result[k] for k in ("later_calls_seconds",
                                                 "later_calls_compiles", "padding_cost")},
                         indent=1))
        print("wrote", write_json("fold_buckets", False, result) + ".json")
