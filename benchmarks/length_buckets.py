"""What padding series to size buckets saves and costs (``HMM.padded_units``,
``approxcv._runtime.sizes.length_bucket``).

The README example (PoissonHMM(2) on the shipped calls) at 2,000 steps, then at 2,030, 1,950
and 2,040 steps (all padded to 2,048; their 10 % folds' rows to 208): each call fits, runs
the IJ on 200 i.i.d. folds and exact CV of 8 of them, timed with its compiled programs
counted, in a fresh process with the padding and in another with it switched off (each
length its own programs). Each process has its own empty compilation cache. Then, warm, the
price of the padding: the same three calls at 2,000 steps padded against unpadded, in one
process (minimum of 5 rounds each, interleaved).

    python benchmarks/length_buckets.py          # writes results/length_buckets.json
"""
from __future__ import annotations

import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from _common import child_json, compile_counter, write_json  # noqa: E402
LENGTHS = (2000, 2030, 1950, 2040)


def _setup(padding: bool):
    import approxcv as acv
    from approxcv.models.hmm import base
    compiles = compile_counter()
    if not padding:
        base.length_bucket = lambda n: n
    return acv, compiles


def _calls(acv, steps: int) -> dict:
    """Fit, IJ on 200 folds and exact CV of 8 of them at ``steps`` steps: seconds each."""
    x = acv.datasets.load_calls(steps)
    model = acv.models.PoissonHMM(n_states=2)
    folds = acv.folds.iid(steps, frac=0.1, n_folds=200, seed=0)
    kw = dict(progress=False, warn=False)
    out, t = {}, time.perf_counter()
    params = model.fit(x)
    out["fit"], t = time.perf_counter() - t, time.perf_counter()
    acv.cross_validate(model, x, folds, "ij", params=params, **kw)
    out["ij"], t = time.perf_counter() - t, time.perf_counter()
    acv.cross_validate(model, x, folds[:8], "exact", params=params, **kw)
    out["exact"] = time.perf_counter() - t
    return out


def child(padding: bool) -> dict:
    """The calls at every length of :data:`LENGTHS` in this (fresh) process."""
    acv, compiles = _setup(padding)
    out = []
    for steps in LENGTHS:
        before = compiles[0]
        seconds = _calls(acv, steps)
        out.append({"steps": steps, "seconds": seconds, "total": sum(seconds.values()),
                    "compiles": compiles[0] - before})
    return {"padding": padding, "calls": out}


def padding_cost(rounds: int = 5) -> dict:
    """Warm calls at 2,000 steps, padded (2,048) and not, interleaved in this process."""
    from approxcv.models.hmm import base
    acv, _ = _setup(True)
    bucket, plain = base.length_bucket, (lambda n: n)
    times = {"padded": [], "unpadded": []}
    for _ in range(rounds + 1):                 # the first round compiles: dropped
        for name, fn in (("padded", bucket), ("unpadded", plain)):
            base.length_bucket = fn
            times[name].append(_calls(acv, LENGTHS[0]))
    best = {k: {stage: min(r[stage] for r in v[1:]) for stage in v[0]}
            for k, v in times.items()}
    return {"warm_seconds": best,
            "padded_over_unpadded": {stage: best["padded"][stage] / best["unpadded"][stage]
                                     for stage in best["padded"]}}


def main() -> dict:
    runs = {"on": child_json(__file__, "--child-on"), "off": child_json(__file__, "--child-off")}
    return {"problem": "PoissonHMM(2), load_calls(T): fit, IJ on 200 iid folds (frac 0.1), "
                       "exact CV of 8 of them",
            "lengths": list(LENGTHS), "padding_on": runs["on"], "padding_off": runs["off"],
            # the calls after the first: what another length costs
            "later_calls_seconds": {k: sum(c["total"] for c in r["calls"][1:])
                                    for k, r in runs.items()},
            "later_calls_compiles": {k: sum(c["compiles"] for c in r["calls"][1:])
                                     for k, r in runs.items()},
            "padding_cost": child_json(__file__, "--cost")}


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
        print("wrote", write_json("length_buckets", False, result) + ".json")
