"""The compile budget: every program XLA compiles for approxcv's first results, cold and warm.

For each scenario a fresh Python process (``python compile.py --child NAME``) runs the work
and records, through ``jax.monitoring``, every program's tracing, lowering (jaxpr to MLIR)
and backend-compile seconds by name, and the persistent-cache hits. Each scenario runs twice
on one fresh compilation-cache directory: ``cold`` (empty cache) and ``warm`` (the cache the
cold run filled). Scenarios:

* ``readme``: the README example (PoissonHMM(2) on 2,000 call volumes, fit, IJ on 200 folds);
* ``gaussian_hmm`` (HMM), ``logistic`` (ERM), ``crf`` (CRF), ``potts`` (MRF), ``composite``
  (a Boltzmann machine fitted by composite likelihood), ``gp`` (``acv.models.GP``): each
  family's smallest example, fit and IJ (LA-LOO for the GP);
* ``tuning``: lambda tuning of a ridge regression by ALOOCV (``tune_regularization``);
* ``select``: ``acv.select`` over PoissonHMM(n_states = 2, 3, 4) with IJ: three distinct
  parameter shapes, so each program should compile at most three times
  (``max_compiles_per_program``);
* ``select_prior``: ``acv.select`` over PoissonHMM(2) with three values of the prior's
  ``rate_rate``: one parameter shape, so ideally one compile per program (run with
  ``--only select_prior``; not in the default list).

A third process per scenario (``kernels``, cache off, not timed) dumps every program XLA
compiles (``--xla_dump_to``) and counts its kernels in the optimised HLO: fusions and the
other instructions outside fusions that the CPU backend emits code for (parameters,
constants, tuples, bitcasts and control flow not counted; the bodies of loops and branches
counted once). Kernels are what the compile time grows with.

Writes ``benchmarks/results/compile[_quick].json`` (per scenario and cache state: total
seconds, import seconds, per-stage seconds, number of programs compiled and loaded from the
cache, stderr bytes, and every program with its trace, lower and compile seconds, compile
count and kernels) and prints a table. Reported, not asserted.

JAX's backend-compile event covers a program compiled or loaded from the persistent cache
alike: ``n_backend_compiles`` counts both, ``n_cache_hits`` the loads, and a program's
``compile`` seconds in a warm run are mostly its loading. A program approxcv's program cache
(``approxcv/_runtime/program_cache.py``) loads is neither traced, lowered nor compiled, so it emits
none of these events: ``program_cache`` records that cache's loads, stores, compiles and
bypasses (with their reasons).

Usage: python benchmarks/compile.py [--quick] [--only NAME ...] [--no-kernels] [--table]
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
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


def _composite(acv, np):
    from approxcv import composite as scl
    bm = scl.BoltzmannMachine(5)
    X = bm.sample(np.r_[-np.ones(5), np.ones(5)], 500, seed=0)
    policy = scl.Policy([scl.pseudo_likelihood(bm, 1), scl.pseudo_likelihood(bm, 2)],
                        select=[1.0, 0.3])
    fit = scl.fit(bm, X, policy, seed=0)
    acv.cross_validate(fit.model, X, acv.folds.kfold(len(X), 10, seed=0), method="ij",
                       params=fit.params, progress=False)


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
    acv.selection.tune_regularization(acv.models.Ridge(lam=1.0), (X, y), 1.0)


def _select(acv, np):
    x = acv.datasets.load_calls(1000)
    folds = acv.folds.iid(len(x), frac=0.1, n_folds=50, seed=0)
    acv.select(acv.models.PoissonHMM, [{"n_states": k} for k in (2, 3, 4)], x, folds,
               progress=False)


def _select_prior(acv, np):
    x = acv.datasets.load_calls(1000)
    folds = acv.folds.iid(len(x), frac=0.1, n_folds=50, seed=0)
    acv.select(acv.models.PoissonHMM, [{"n_states": 2, "rate_rate": r}
                                       for r in (1e-3, 1e-2, 1e-1)], x, folds, progress=False)


SCENARIOS = {"readme": _readme, "gaussian_hmm": _gaussian_hmm, "logistic": _logistic,
             "crf": _crf, "potts": _potts, "composite": _composite, "gp": _gp,
             "tuning": _tuning, "select": _select, "select_prior": _select_prior}

#: instructions that are no kernel of their own
_NOT_KERNELS = {"parameter", "constant", "get-tuple-element", "tuple", "bitcast", "while",
                "conditional", "call", "after-all", "opt-barrier", "partition-id",
                "replica-id", "iota"}
_OPCODE = re.compile(r"^\s*(?:ROOT\s+)?%?[\w.\-]+\s*=\s*[^=]*?\s([a-z][\w\-]*)\(")


def hlo_kernels(text: str) -> int:
    """Kernels of one optimised HLO module (module docstring): instructions of the entry
    computation and of the loop bodies, conditions, branches and called computations,
    except :data:`_NOT_KERNELS`; a fusion counts one."""
    comps, name = {}, None
    for line in text.splitlines():
        head = re.match(r"^(ENTRY\s+)?%?([\w.\-]+)\s.*\{\s*$", line)
        if head and not line.startswith(" "):
            name = ("ENTRY " if head.group(1) else "") + head.group(2)
            comps[name] = []
        elif name is not None and line.strip() and line.strip() != "}":
            comps[name].append(line)
    entry = next((n for n in comps if n.startswith("ENTRY ")), None)
    if entry is None:
        return 0
    ref = re.compile(r"(?:body|condition|true_computation|false_computation)=%?([\w.\-]+)"
                     r"|branch_computations=\{([^}]*)\}")
    todo, seen, count = [entry], set(), 0
    while todo:
        comp = todo.pop()
        if comp in seen or comp not in comps:
            continue
        seen.add(comp)
        for line in comps[comp]:
            m = _OPCODE.match(line)
            if m is None:
                continue
            op = m.group(1)
            if op == "call":
                todo += re.findall(r"to_apply=%?([\w.\-]+)", line)
            for one, many in ref.findall(line):
                todo += [one] if one else [c.strip().lstrip("%") for c in many.split(",")]
            count += op not in _NOT_KERNELS
    return count


def kernels_by_program(dump: str) -> dict:
    """``{program name: [kernels of each compiled module]}`` from an XLA dump directory
    (``jit_f`` is reported as ``jit(f)``, the name ``jax.monitoring`` uses)."""
    out = {}
    for path in sorted(glob.glob(os.path.join(dump, "*.cpu_after_optimizations.txt"))):
        module = os.path.basename(path).split(".")[1]
        inner = "<lambda>" if module == "jit__lambda" else module[4:]
        name = f"jit({inner})" if module.startswith("jit_") else module
        with open(path) as f:
            out.setdefault(name, []).append(hlo_kernels(f.read()))
    return out


def child(name: str) -> dict:
    """Run one scenario in this (fresh) process; return its compile record."""
    t0 = time.perf_counter()
    from jax import monitoring
    programs, hits = {}, [0]

    def on_duration(event, secs, fun_name=None, **_):
        if event in STAGE:
            name = fun_name or "?"
            if not name.startswith("jit("):     # tracing reports the function's own name
                name = f"jit({name})"
            rec = programs.setdefault(name, {"trace": 0.0, "lower": 0.0,
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
    from approxcv._runtime import program_cache as _program_cache
    cache = _program_cache.stats
    stages = {s: sum(p[s] for p in programs.values()) for s in ("trace", "lower", "compile")}
    top = sorted(programs.items(), key=lambda kv: -kv[1]["compile"])
    return {"total_s": total, "import_s": t_import, "stage_s": stages,
            "n_backend_compiles": sum(p["count"] for p in programs.values()),
            "n_cache_hits": hits[0],
            "n_programs": sum(p["count"] > 0 for p in programs.values()),
            "max_compiles_per_program": max((p["count"] for p in programs.values()),
                                            default=0),
            "programs": [dict(name=k, **v) for k, v in top if v["count"] > 0],
            "traced_only": {k: v["trace"] for k, v in programs.items() if not v["count"]},
            "program_cache": {"loaded": cache["loaded"], "stored": cache["stored"],
                              "compiled": cache["compiled"], "bypassed": cache["bypassed"],
                              "reasons": dict(cache["reasons"])}}


def run(name: str, cache: str, dump: str | None = None) -> dict:
    env = {k: v for k, v in os.environ.items()
           if k not in ("APPROXCV_NO_COMPILATION_CACHE", "TF_CPP_MIN_LOG_LEVEL",
                        "JAX_COMPILATION_CACHE_DIR")}
    env["APPROXCV_COMPILATION_CACHE_DIR"] = cache
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.path.dirname(HERE),
                                                      env.get("PYTHONPATH")]))
    if dump:                                    # the kernel count: no cache, every program dumped
        env["APPROXCV_NO_COMPILATION_CACHE"] = "1"
        env["XLA_FLAGS"] = " ".join(filter(None, [env.get("XLA_FLAGS"),
                                                  f"--xla_dump_to={dump}"]))
    t = time.perf_counter()
    proc = subprocess.run([sys.executable, __file__, "--child", name], env=env,
                          capture_output=True, text=True, timeout=1800)
    if proc.returncode:
        return {"error": proc.stderr[-2000:], "wall_s": time.perf_counter() - t}
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["stderr_bytes"] = len(proc.stderr.encode())
    out["stderr_head"] = proc.stderr[:500]
    out["wall_s"] = time.perf_counter() - t
    return out


def scenario(name: str, kernels: bool = True) -> dict:
    """Cold and warm runs of one scenario on a fresh cache directory; each program's
    kernels (from a third, dumping process) joined to both."""
    with tempfile.TemporaryDirectory() as cache:
        runs = {"cold": run(name, cache), "warm": run(name, cache)}
    if kernels:
        with tempfile.TemporaryDirectory() as dump:
            dumped = run(name, tempfile.gettempdir(), dump)
            counts = kernels_by_program(dump)
        runs["kernels_error"] = dumped.get("error")
        for state in ("cold", "warm"):
            for prog in runs[state].get("programs", []):
                prog["kernels"] = counts.get(prog["name"])
            if "programs" in runs[state]:
                runs[state]["total_kernels"] = sum(sum(k) for k in counts.values())
    return runs


def main(quick: bool, only, kernels: bool = True) -> dict:
    names = only or (["readme", "tuning"] if quick else
                     [n for n in SCENARIOS if n != "select_prior"])
    load = os.getloadavg() if hasattr(os, "getloadavg") else None
    out = {"cores": os.cpu_count(), "load_before": load, "scenarios": {}}
    path = os.path.join(HERE, "results", "compile" + ("_quick" if quick else "") + ".json")
    if only and os.path.exists(path):           # add to the scenarios already measured
        with open(path) as f:
            out["scenarios"] = json.load(f).get("scenarios", {})
    for name in names:
        out["scenarios"][name] = scenario(name, kernels)
        out["scenarios"][name]["load_after"] = os.getloadavg() if load else None
        write_json("compile", quick, out)
    return out


def table(out: dict) -> str:
    rows = ["| scenario | cache | total s | import s | trace s | lower s | compile s | "
            "compiled | loaded | program cache loads | kernels | stderr bytes |",
            "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for name, runs in out["scenarios"].items():
        for state in ("cold", "warm"):
            r = runs.get(state, {})
            if "error" in r or not r:
                rows.append(f"| {name} | {state} | error | | | | | | | | | |")
                continue
            s = r["stage_s"]
            rows.append(f"| {name} | {state} | {r['total_s']:.1f} | {r['import_s']:.1f} | "
                        f"{s['trace']:.1f} | {s['lower']:.1f} | {s['compile']:.1f} | "
                        f"{r['n_backend_compiles'] - r['n_cache_hits']} | {r['n_cache_hits']} | "
                        f"{r.get('program_cache', {}).get('loaded', '')} | "
                        f"{r.get('total_kernels', '')} | {r['stderr_bytes']} |")
    return "\n".join(rows)


def programs_table(out: dict, name: str, top: int = 8) -> str:
    """The ``top`` programs of one scenario by cold compile seconds, cold and warm."""
    runs = out["scenarios"][name]
    warm = {p["name"]: p for p in runs.get("warm", {}).get("programs", [])}
    rows = ["| program | compiles | kernels | trace s | lower s | compile s cold | "
            "compile or load s warm |", "|---|---|---|---|---|---|---|"]
    for p in runs.get("cold", {}).get("programs", [])[:top]:
        w = warm.get(p["name"], {})
        k = p.get("kernels")
        rows.append(f"| `{p['name']}` | {p['count']} | {'' if k is None else max(k)} | "
                    f"{p['trace']:.2f} | {p['lower']:.2f} | {p['compile']:.2f} | "
                    f"{w.get('compile', 0.0):.2f} |")
    return "\n".join(rows)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--child")
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--no-kernels", action="store_true")
    ap.add_argument("--table", action="store_true", help="print the tables of the JSON")
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.child)))
    else:
        if args.table:
            with open(os.path.join(HERE, "results",
                                   "compile" + ("_quick" if args.quick else "") + ".json")) as f:
                result = json.load(f)
        else:
            result = main(args.quick, args.only, not args.no_kernels)
        print(table(result))
        for scenario_name in result["scenarios"]:
            print(f"\n{scenario_name}\n" + programs_table(result, scenario_name))
