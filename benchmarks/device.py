"""Headline benchmarks on an accelerator, with their agreement with the CPU: the driver of
``benchmarks/device.sh`` (issue 39, item 6).

Four benchmarks, each a function of one size table (``SIZES``):

* ``lwcv_ij``: a PoissonHMM(2) on ``T`` simulated counts (full: T = 10^6), fit, then IJ on
  1,000 contiguous folds (leave-within-structure-out on one long series);
* ``crf_lso``: a linear-chain CRF on simulated sentences, IJ leaving each sentence out
  (CoNLL-2003 is not installed on the device machine, which cannot download it);
* ``gp_la_loo``: a probit GP (``acv.models.GP``, Laplace) fitted by type-II MAP, then LA-LOO
  (``cross_validate(..., leave_one_out, "la")``; full: n = 5,000);
* ``exact_batches``: exact CV (warm-started refits in batches) of a PoissonHMM(2).

approxcv places an HMM's fit and cross-validation on the host's CPU beside an accelerator
(``approxcv._runtime.placement``: a recursion over time runs one kernel launch per step on a GPU);
each record names where its CV ran (``cv_device``, from ``diagnostics["device"]``). At the
small size, on an accelerator, the two HMM benchmarks also run with ``device="default"``
(the GPU), first and warm call, so the JSON shows what the placement saves
(``cv_default_s``, ``cv_warm_default_s``).

``python device.py --size {small,full} --out X.json`` runs them on JAX's default backend
(``JAX_PLATFORMS=cpu`` for the CPU) and writes each one's seconds (fit and CV apart, the
first call with its compiles and, for the small size, a second warm call) and its numbers
(fold losses, LOO terms) and each result's ``stage_seconds``; ``--combine CPU.json DEV.json
[FULL.json ...] --out OUT.json`` joins the runs: device, times, and the largest relative
difference between the device's and the CPU's numbers at the small size (the full-size runs,
one file per benchmark, are merged). A benchmark that raises is recorded with its error; the
others still run; the JSON is rewritten after each benchmark, so a run stopped by its time
limit keeps what it finished. ``--only NAME ...`` runs just those benchmarks (e.g.
``--only gp_la_loo``).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
import traceback
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

#: sizes per benchmark: ``small`` runs in seconds on a CPU (and is what the CPU and the
#: device both run to compare numbers); ``full`` is the headline size, for the device
SIZES = {
    "small": {"lwcv_T": 2_000, "lwcv_folds": 50, "crf_sentences": 40, "gp_n": 100,
              "exact_T": 1_000, "exact_folds": 8},
    "full": {"lwcv_T": 1_000_000, "lwcv_folds": 1_000, "crf_sentences": 2_000,
             "gp_n": 5_000, "exact_T": 20_000, "exact_folds": 64},
}


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def simulate_poisson_hmm(T: int, seed: int = 0) -> np.ndarray:
    """Counts of a 2-state Poisson HMM (rates 5 and 40, staying probability 0.98)."""
    rng = np.random.default_rng(seed)
    switch = rng.random(T) < 0.02
    state = np.cumsum(switch) % 2
    return rng.poisson(np.where(state == 0, 5.0, 40.0)).astype(float)


def simulate_sentences(n: int, seed: int = 0, n_features: int = 10, n_labels: int = 3):
    """``n`` sentences of 5-20 tokens: features, labels drawn from a linear model of them."""
    rng = np.random.default_rng(seed)
    W = rng.normal(size=(n_features, n_labels))
    out = []
    for _ in range(n):
        X = rng.normal(size=(int(rng.integers(5, 21)), n_features))
        y = np.argmax(X @ W + rng.gumbel(size=(len(X), n_labels)), axis=1)
        out.append((X, y))
    return out


def fitted(name: str, seconds: float) -> None:
    """A progress line: what a run stopped by its time limit had reached."""
    print(f"{name}: fitted in {seconds:.2f} s", flush=True)


def stages(result) -> dict:
    return {k: float(v) for k, v in getattr(result, "stage_seconds", {}).items()}


def lwcv_ij(acv, s):
    x = simulate_poisson_hmm(s["lwcv_T"])
    model = acv.models.PoissonHMM(2)
    params, t_fit = timed(lambda: model.fit(x))
    fitted("lwcv_ij", t_fit)
    folds = acv.folds.contiguous(len(x), 0.001 if len(x) >= 100_000 else 0.02,
                                 s["lwcv_folds"], seed=0)
    run = lambda device=None: acv.cross_validate(  # noqa: E731
        model, x, folds, method="ij", params=params, progress=False, warn=False,
        device=device)
    ij, t_cv = timed(run)
    return {"fit_s": t_fit, "cv_s": t_cv, "cv_device": ij.diagnostics.get("device"),
            "stage_seconds": stages(ij), "values": np.asarray(ij.fold_loss).tolist(),
            "repeat": run}


def crf_lso(acv, s):
    sents = simulate_sentences(s["crf_sentences"])
    model = acv.models.LinearChainCRF(n_labels=3)
    params, t_fit = timed(lambda: model.fit(sents))
    fitted("crf_lso", t_fit)
    folds = acv.folds.leave_one_out(len(sents))
    run = lambda: acv.cross_validate(model, sents, folds, method="ij",  # noqa: E731
                                     params=params, level="structure", progress=False,
                                     warn=False)
    ij, t_cv = timed(run)
    return {"fit_s": t_fit, "cv_s": t_cv, "cv_device": ij.diagnostics.get("device"),
            "stage_seconds": stages(ij),
            "values": np.asarray(ij.fold_loss).tolist(),
            "repeat": run}


def gp_la_loo(acv, s):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(s["gp_n"], 2))
    y = np.where(np.sin(2 * X[:, 0]) + 0.5 * X[:, 1] + 0.3 * rng.normal(size=len(X)) > 0,
                 1.0, -1.0)
    model, data = acv.models.GP("probit", inference="laplace"), (X, y)
    params, t_fit = timed(lambda: model.fit(data))
    fitted("gp_la_loo", t_fit)
    folds = acv.folds.leave_one_out(len(y))
    run = lambda: acv.cross_validate(model, data, folds, "la",  # noqa: E731
                                     params=params, progress=False)
    res, t_cv = timed(run)
    return {"fit_s": t_fit, "cv_s": t_cv, "cv_device": res.diagnostics.get("device"),
            "stage_seconds": stages(res),
            "values": np.asarray(res.fold_loss, float).tolist(),
            "repeat": run}


def exact_batches(acv, s):
    x = simulate_poisson_hmm(s["exact_T"], seed=1)
    model = acv.models.PoissonHMM(2)
    params, t_fit = timed(lambda: model.fit(x))
    fitted("exact_batches", t_fit)
    folds = acv.folds.iid(len(x), 0.1, s["exact_folds"], seed=0)
    run = lambda device=None: acv.cross_validate(  # noqa: E731
        model, x, folds, method="exact", params=params, progress=False, warn=False,
        device=device)
    ex, t_cv = timed(run)
    return {"fit_s": t_fit, "cv_s": t_cv, "cv_device": ex.diagnostics.get("device"),
            "stage_seconds": stages(ex),
            "values": np.asarray(ex.fold_loss).tolist(),
            "repeat": run}


BENCHMARKS = {"lwcv_ij": lwcv_ij, "crf_lso": crf_lso, "gp_la_loo": gp_la_loo,
              "exact_batches": exact_batches}


def run(size: str, only=None, path=None) -> dict:
    t0 = time.perf_counter()
    import jax

    import approxcv as acv
    dev = jax.devices()[0]
    out = {"size": size, "sizes": SIZES[size], "backend": jax.default_backend(),
           "device": f"{dev.platform}: {getattr(dev, 'device_kind', '')}",
           "jax": jax.__version__, "host": platform.node(), "cpus": os.cpu_count(),
           "import_s": time.perf_counter() - t0, "benchmarks": {}}
    for name, bench in BENCHMARKS.items():
        if only and name not in only:
            continue
        try:
            with warnings.catch_warnings(record=True) as caught:   # kept in the JSON
                warnings.simplefilter("always")
                rec = bench(acv, SIZES[size])
                repeat = rec.pop("repeat")
                if size == "small":             # a warm call: the compiles are done
                    rec["cv_warm_s"] = timed(repeat)[1]
                    # approxcv ran it off the default backend (an HMM beside a GPU): the
                    # same call kept there, to show what the placement saves
                    if rec.get("cv_device") not in (None, jax.default_backend()):
                        rec["cv_default_s"] = timed(lambda: repeat("default"))[1]
                        rec["cv_warm_default_s"] = timed(lambda: repeat("default"))[1]
            rec["warnings"] = sorted({f"{w.category.__name__}: {str(w.message)[:200]}"
                                      for w in caught})
        except Exception as err:  # noqa: BLE001  (recorded; the other benchmarks still run)
            rec = {"error": f"{type(err).__name__}: {err}",
                   "traceback": traceback.format_exc()[-2000:]}
        out["benchmarks"][name] = rec
        print(name, {k: v for k, v in rec.items() if k not in ("values", "traceback")},
              flush=True)
        out["total_s"] = time.perf_counter() - t0
        if path:                                # what is finished survives a time limit
            write(out, path)
    return out


def write(result: dict, path: str) -> None:
    with open(path + ".tmp", "w") as f:
        json.dump(result, f, indent=1, default=float)
    os.replace(path + ".tmp", path)


def max_rel_diff(a, b) -> float | None:
    a, b = np.asarray(a, float), np.asarray(b, float)
    if a.shape != b.shape or a.size == 0:
        return None
    return float(np.max(np.abs(a - b) / np.maximum(np.abs(b), 1e-12)))


def combine(cpu: dict, dev: dict, fulls: list[dict]) -> dict:
    """Device, times and agreement: the device's small-size numbers against the CPU's; the
    full-size runs (one file per benchmark, on either backend) merged, with the agreement of
    the device's full-size numbers with the CPU's where both ran."""
    first = next((r for r in [dev, *fulls] if r["backend"] not in (None, "cpu")), dev)
    out = {"device": first["device"], "jax": first["jax"], "cpu_reference": cpu["device"],
           "missing": [r["missing"] for r in (cpu, dev) if "missing" in r],
           "agreement_small": {}, "small": {}, "full": None}
    for name in {**dev["benchmarks"], **cpu["benchmarks"]}:
        d, c = dev["benchmarks"].get(name, {}), cpu["benchmarks"].get(name, {})
        out["agreement_small"][name] = max_rel_diff(d.get("values", []), c.get("values", []))
        out["small"][name] = {"device": {k: v for k, v in d.items() if k != "values"},
                              "cpu": {k: v for k, v in c.items() if k != "values"}}
    if not fulls:
        return out
    out["full"] = {"sizes": fulls[0]["sizes"], "device": {}, "cpu": {}, "agreement": {}}
    runs = {"device": {}, "cpu": {}}
    for f in fulls:
        side = "cpu" if f["backend"] == "cpu" else "device"
        runs[side].update(f["benchmarks"])
        for k, v in f["benchmarks"].items():
            out["full"][side][k] = {kk: vv for kk, vv in v.items() if kk != "values"}
    for name, d in runs["device"].items():
        c = runs["cpu"].get(name)
        if c is not None and "error" not in d and "error" not in c:
            out["full"]["agreement"][name] = max_rel_diff(d["values"], c["values"])
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--size", choices=list(SIZES), default="small")
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--combine", nargs="+", metavar="JSON")
    ap.add_argument("--out", required=True)
    args = ap.parse_args()
    if args.combine:
        runs = []
        for p in args.combine:      # a step that failed or ran out of time left no file
            if os.path.exists(p):
                with open(p) as f:
                    runs.append(json.load(f))
            else:
                runs.append({"device": None, "jax": None, "backend": None, "sizes": None,
                             "benchmarks": {}, "missing": os.path.basename(p)})
        write(combine(runs[0], runs[1], runs[2:]), args.out)
    else:
        run(args.size, args.only, args.out)
