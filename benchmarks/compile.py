"""The compile budget: every program XLA compiles for approxcv's first results, cold and warm.

For each scenario a fresh Python process (``python compile.py --child NAME``) runs the work
and records, through ``jax.monitoring``, every program's tracing, lowering (jaxpr to MLIR)
and backend-compile seconds by name, and the persistent-cache hits. Each scenario runs twice
on one fresh compilation-cache directory: ``cold`` (empty cache) and ``warm`` (the cache the
cold run filled). Scenarios:

* ``readme``: the README example (PoissonHMM(2) on 2,000 call volumes, fit, IJ on 200 folds);
* ``gaussian_hmm``, ``logistic``, ``crf``, ``potts``, ``gp``: each family's smallest example;
* ``tuning``: lambda tuning of a ridge regression by ALOOCV (``tune_regularization``);
* ``select``: ``acv.select`` over PoissonHMM(n_states = 2, 3, 4) with IJ.

Writes ``benchmarks/results/compile[_quick].json`` (per scenario and cache state: total
seconds, per-stage seconds, number of programs compiled and loaded, and the programs sorted
by compile time) and prints a table. Reported, not asserted.

Usage: python benchmarks/compile.py [--quick] [--only NAME ...]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _common import write_json  # noqa: E402

TRACE, LOWER, COMPILE = ("/jax/core/compile/jaxpr_trace_duration",
                         "/jax/core/compile/jaxpr_to_mlir_module_duration",
                         "/jax/core/compile/backend_compile_duration")
STAGE = {TRACE: "trace", LOWER: "lower", COMPILE: "compile"}


def _readme(acv, np):
    x = acv.datasets.load_calls(2000)
    model = acv.models.PoissonHMM(n_states=2)
    params = model.fit(x)
    folds = acv.folds.iid(len(x), frac=0.1, n_folds=200, seed=0)
    acv.cross_validate(model, x, folds, method="ij", params=params, progress=False)


def _gaussian_hmm(acv, np):
    rng = np.random.default_rng(0)
    x = rng.normal(size=(300, 2)) + np.repeat(np.array([[0.0, 0.0], [2.0, -1.0]]), 150, 0)
    model = acv.models.GaussianHMM(n_states=2)
    params = model.fit(x)
    acv.cross_validate(model, x, acv.folds.iid(len(x), 0.1, 20, seed=0), method="ij",
                       params=params, progress=False)


def _logistic(acv, np):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(100, 5))
    y = (X @ rng.normal(size=5) + rng.normal(size=100) > 0).astype(float)
    model = acv.models.Logistic(lam=1.0)
    params = model.fit((X, y))
    acv.cross_validate(model, (X, y), acv.folds.leave_one_out(100), params=params,
                       progress=False)


def _crf(acv, np):
    rng = np.random.default_rng(0)
    sents = [(rng.normal(size=(6, 3)), rng.integers(0, 2, 6)) for _ in range(8)]
    model = acv.models.LinearChainCRF(n_labels=2)
    params = model.fit(sents)
    acv.cross_validate(model, sents, acv.folds.leave_one_out(8), method="ij", params=params,
                       level="structure", progress=False)


def _potts(acv, np):
    side = 4
    idx = np.arange(side * side).reshape(side, side)
    adj = np.zeros((side * side,) * 2, bool)
    adj[idx[:, :-1].ravel(), idx[:, 1:].ravel()] = True
    adj[idx[:-1].ravel(), idx[1:].ravel()] = True
    adj = adj | adj.T
    counts = np.random.default_rng(0).poisson(3.0, side * side)
    model = acv.models.HiddenPotts(adj, n_states=2, beta=0.5)
    params = model.fit(counts)
    acv.cross_validate(model, counts, acv.folds.leave_one_out(side * side), method="ij",
                       params=params, progress=False)


def _gp(acv, np):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 2))
    y = (X[:, 0] + 0.5 * rng.normal(size=40) > 0).astype(float)
    model = acv.models.GP("probit")
    acv.cross_validate(model, (X, y), acv.folds.leave_one_out(40), "la", progress=False)


def _tuning(acv, np):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(80, 10))
    y = X @ rng.normal(size=10) + rng.normal(size=80)
    acv.tuning.tune_regularization(acv.models.Ridge(lam=1.0), (X, y), 1.0)


def _select(acv, np):
    x = acv.datasets.load_calls(1000)
    folds = acv.folds.iid(len(x), frac=0.1, n_folds=50, seed=0)
    acv.select(acv.models.PoissonHMM, [{"n_states": k} for k in (2, 3, 4)], x, folds,
               progress=False)


SCENARIOS = {"readme": _readme, "gaussian_hmm": _gaussian_hmm, "logistic": _logistic,
             "crf": _crf, "potts": _potts, "gp": _gp, "tuning": _tuning, "select": _select}


def child(name: str) -> dict:
    """Run one scenario in this (fresh) process; return its compile record."""
    t0 = time.perf_counter()
    from jax import monitoring
    programs, hits = {}, [0]

    def on_duration(event, secs, fun_name=None, **_):
        if event in STAGE:
            rec = programs.setdefault(fun_name or "?", {"trace": 0.0, "lower": 0.0,
                                                         "compile": 0.0, "count": 0})
            rec[STAGE[event]] += secs
            rec["count"] += event == COMPILE

    def on_event(event, **_):
        hits[0] += event == "/jax/compilation_cache/cache_hits"

    monitoring.register_event_duration_secs_listener(on_duration)
    monitoring.register_event_listener(on_event)
    import numpy as np

    import approxcv as acv
    t_import = time.perf_counter() - t0
    SCENARIOS[name](acv, np)
    total = time.perf_counter() - t0
    stages = {s: sum(p[s] for p in programs.values()) for s in ("trace", "lower", "compile")}
    top = sorted(programs.items(), key=lambda kv: -kv[1]["compile"])
    return {"total_s": total, "import_s": t_import, "stage_s": stages,
            "n_backend_compiles": sum(p["count"] for p in programs.values()),
            "n_cache_hits": hits[0], "n_programs": len(programs),
            "programs": [dict(name=k, **v) for k, v in top]}


def run(name: str, cache: str) -> dict:
    env = dict(os.environ, XDG_CACHE_HOME=cache)
    env.pop("APPROXCV_NO_COMPILATION_CACHE", None)
    proc = subprocess.run([sys.executable, __file__, "--child", name], env=env,
                          capture_output=True, text=True, timeout=1800)
    if proc.returncode:
        return {"error": proc.stderr[-2000:]}
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["stderr_bytes"] = len(proc.stderr.encode())
    return out


def main(quick: bool, only) -> dict:
    names = only or (["readme", "tuning"] if quick else list(SCENARIOS))
    out = {"scenarios": {}}
    for name in names:
        with tempfile.TemporaryDirectory() as cache:
            out["scenarios"][name] = {"cold": run(name, cache), "warm": run(name, cache)}
        write_json("compile", quick, out)
    return out


def table(out: dict) -> str:
    rows = ["| scenario | cache | total s | trace s | lower s | compile s | compiles | "
            "cache hits | stderr bytes |", "|---|---|---|---|---|---|---|---|---|"]
    for name, runs in out["scenarios"].items():
        for state, r in runs.items():
            if "error" in r:
                rows.append(f"| {name} | {state} | error | | | | | | |")
                continue
            s = r["stage_s"]
            rows.append(f"| {name} | {state} | {r['total_s']:.1f} | {s['trace']:.1f} | "
                        f"{s['lower']:.1f} | {s['compile']:.1f} | {r['n_backend_compiles']} | "
                        f"{r['n_cache_hits']} | {r['stderr_bytes']} |")
    return "\n".join(rows)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--child")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", nargs="*")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child)))
    else:
        print(table(main(args.quick, args.only)))
