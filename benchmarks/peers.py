"""approxcv against the tools a user would otherwise pick, each pair in its own process.

Pairs (both sides in one fresh process, so a ratio is measured under the same load):

* ``logistic_tuning_bbai``: logistic regression on scikit-learn's breast cancer (569 x 30,
  standardised), the penalty tuned by approximate LOO: ``tune_regularization`` (Newton steps
  on ALOOCV) against bbai's ``LogisticRegression`` (which fits C by approximate LOO). First
  call in two fresh processes (compilation included: with an empty persistent compilation
  cache, then with the cache that call filled), the least of 5 later calls, C of each
  (``lam = 1 / C``), ALOOCV at both Cs, exact LOO at ours, and the C minimising ALOOCV by
  a derivative-free golden-section search (an independent check of both tuners).
* ``logistic_loo_sklearn``: leave-one-out CV at that C: NS (ALOOCV) against 569
  scikit-learn refits.
* ``poisson_hmm_1e5``, ``poisson_hmm_1e6``: PoissonHMM(2) fits on synthetic two-regime counts
  (rates 2 and 8, stay probability 0.98) against hmmlearn's ``PoissonHMM`` and dynamax's
  EM (``fit_em``): the least of 3 warm fits each (ours also its first), and every fit's
  log-likelihood evaluated by hmmlearn's ``score``.
* ``gaussian_hmm_1500``: GaussianHMM(3) on 2-D data, T = 1,500, warm fits against hmmlearn
  with its defaults (10 iterations) and run to convergence; targets against both.
* ``lwcv_ij_1e6``: IJ leave-within-structure-out CV of PoissonHMM(2) at T = 10^6, 1,000
  i.i.d. folds of 10 %: time after the fit and the process's peak memory (no peer).
* ``loo_ij_2e5``: IJ leave-one-out CV of PoissonHMM(2) at T = 200,000 (held-out losses and
  error estimates in windows of the series, ``approxcv.engine.windows``), with the
  progress bars on: time after the fit, peak memory, how the windows were used, and the
  fold losses of 200 seeded folds against the full passes (no peer).
* ``hidden_potts_pgmpy``: exact marginal likelihood of a 3-state hidden Potts model on
  the SIDS graph against pgmpy's VariableElimination (``mrf_sids.py``'s timing).
* Recorded, not re-run (their benchmarks take minutes to hours): sklearn-crfsuite
  (``crf_crfsuite.json``) and GPy (``bayes_loo.json``).

Targets (issue 26) are reported with each pair, not asserted. Writes
``results/peers.json`` and ``results/peers.md`` (the table the README links to).

    python benchmarks/peers.py [--quick] [--pair NAME [--merge]]

``--merge`` re-runs one pair and writes it into the recorded ``results/peers.json`` and
``peers.md`` (the other pairs as last recorded).
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from _common import RESULTS, write_json  # noqa: E402


def _least(fn, repeats):
    times, out = [], None
    for _ in range(repeats):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return out, min(times)


def _one_thread():
    """One BLAS/OpenMP thread for the NumPy-based peers (spinning threads on a busy 2-core
    machine slowed hmmlearn up to 100x); JAX is not affected."""
    try:
        from threadpoolctl import threadpool_limits
        return threadpool_limits(1)
    except ImportError:
        return contextlib.nullcontext()


def _breast_cancer():
    from sklearn.datasets import load_breast_cancer
    X, y = load_breast_cancer(return_X_y=True)
    return (X - X.mean(0)) / X.std(0), y.astype(float)


# ------------------------------------------------------------------------- pairs
_FIRST_TUNING_CALL = """
import sys, time
sys.path.insert(0, {here!r})
import approxcv as acv
from approxcv.selection import tune_regularization
from peers import _breast_cancer
X, y = _breast_cancer()
t = time.perf_counter()
tune_regularization(acv.models.Logistic(1.0), (X, y), 1.0)
print(time.perf_counter() - t)
"""


def _first_tuning_calls() -> dict:
    """Seconds of the first tuning call in fresh processes (imports and data loading not
    counted): with an empty compilation cache (everything traced and compiled), then with
    the cache that call filled (traced, compiled programs read back)."""
    out = {}
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "XDG_CACHE_HOME": cache}
        for key in ("first_call_cold_cache_s", "first_call_filled_cache_s"):
            run = subprocess.run([sys.executable, "-c", _FIRST_TUNING_CALL.format(here=HERE)],
                                 env=env, capture_output=True, text=True, check=True)
            out[key] = float(run.stdout.strip().splitlines()[-1])
    return out


def _aloocv_minimiser(f, c0: float, width: float = 1.2, steps: int = 60) -> float:
    """The ``C`` minimising ``f(C)`` within ``[c0 / width, c0 * width]``, by golden-section
    search in ``log C`` (no derivatives: an independent check of the tuners' optima)."""
    import math
    a, b = math.log(c0 / width), math.log(c0 * width)
    r = (math.sqrt(5.0) - 1.0) / 2.0
    c, d = b - r * (b - a), a + r * (b - a)
    fc, fd = f(math.exp(c)), f(math.exp(d))
    for _ in range(steps):
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - r * (b - a)
            fc = f(math.exp(c))
        else:
            a, c, fc = c, d, fd
            d = a + r * (b - a)
            fd = f(math.exp(d))
    return math.exp(0.5 * (a + b))


def logistic_tuning_bbai(quick):
    import approxcv as acv
    from approxcv.selection import aloocv_gradient, tune_regularization
    X, y = _breast_cancer()
    t = time.perf_counter()
    ours = tune_regularization(acv.models.Logistic(1.0), (X, y), 1.0)
    first = time.perf_counter() - t
    ours, second = _least(lambda: tune_regularization(acv.models.Logistic(1.0), (X, y), 1.0), 5)
    c_ours = 1.0 / float(ours.best_lam[0])
    out = {"ours_first_call_s": first, "ours_s": second, "ours_C": c_ours,
           "ours_aloocv": ours.best_acv, "ours_steps": len(ours.path) - 1,
           "ours_converged": ours.converged,
           "compilation_cache": acv.compilation_cache_dir is not None}
    exact = acv.cross_validate(ours.model, (X, y), acv.folds.leave_one_out(len(y)), "exact",
                               params=ours.best_params, progress=False, warn=False)
    out["exact_loo_at_ours"] = float(exact.fold_loss.mean())
    try:
        from bbai.glm import LogisticRegression
    except ImportError:
        return {**out, "peer": "bbai not installed"}
    with _one_thread():
        model, peer_s = _least(lambda: LogisticRegression().fit(X, y), 5)
    c_peer = float(model.C_)
    out.update(peer="bbai LogisticRegression", peer_s=peer_s, peer_C=c_peer,
               aloocv_at_peer_C=aloocv_gradient(acv.models.Logistic(1.0 / c_peer), (X, y))[0],
               ratio=second / peer_s, C_rel_diff=abs(c_ours - c_peer) / c_peer)
    best = _aloocv_minimiser(
        lambda c: float(aloocv_gradient(acv.models.Logistic(1.0 / c), (X, y))[0]), c_ours)
    out.update(aloocv_minimiser_C=best, ours_C_rel_diff_to_minimiser=abs(c_ours - best) / best,
               peer_C_rel_diff_to_minimiser=abs(c_peer - best) / best)
    if not quick:
        out.update(_first_tuning_calls())
    out["targets"] = {"second_call_within_2x": out["ratio"] <= 2.0,
                      "first_call_le_1s": out.get("first_call_cold_cache_s", first) <= 1.0,
                      "same_C_1e-3": out["C_rel_diff"] <= 1e-3}
    return out


def logistic_loo_sklearn(quick):
    import numpy as np
    import approxcv as acv
    from sklearn.linear_model import LogisticRegression
    X, y = _breast_cancer()
    C = 0.6647
    model = acv.models.Logistic(1.0 / C)
    params = model.fit((X, y))
    loo = acv.folds.leave_one_out(len(y))
    acv.cross_validate(model, (X, y), loo, "ns", params=params, progress=False, warn=False)
    res, ours_s = _least(lambda: acv.cross_validate(model, (X, y), loo, "ns", params=params,
                                                    progress=False, warn=False), 3)
    n = len(y) if not quick else 60

    def refits():
        losses = []
        for i in range(n):
            keep = np.arange(len(y)) != i
            m = LogisticRegression(C=C, tol=1e-10, max_iter=10_000).fit(X[keep], y[keep])
            p = m.predict_proba(X[i:i + 1])[0, int(y[i])]
            losses.append(-np.log(p))
        return np.array(losses)
    with _one_thread():
        losses, peer_s = _least(refits, 1)
    peer_s *= len(y) / n
    return {"ours_s": ours_s, "peer": "scikit-learn LogisticRegression refits",
            "peer_s": peer_s, "refits_timed": n, "ratio": ours_s / peer_s,
            "ours_loo": float(res.fold_loss.mean()), "peer_loo": float(losses.mean()),
            "ours_loo_same_folds": float(res.fold_loss[:n].mean())}


def _two_regime_counts(T, seed=0):
    import numpy as np
    rng = np.random.default_rng(seed)
    flips = rng.random(T) >= 0.98
    z = np.cumsum(flips) % 2
    return rng.poisson(np.array([2.0, 8.0])[z]).astype(float)


def _hmmlearn_score(x, startprob, transmat, rates):
    import numpy as np
    from hmmlearn import hmm
    m = hmm.PoissonHMM(n_components=len(rates), init_params="", params="")
    m.startprob_, m.transmat_ = np.asarray(startprob), np.asarray(transmat)
    m.lambdas_ = np.asarray(rates, dtype=float).reshape(-1, 1)
    return float(m.score(x.astype(int).reshape(-1, 1)))


def _poisson_hmm(T, quick):
    import approxcv as acv
    T = T if not quick else T // 100
    x = _two_regime_counts(T)
    model = acv.models.PoissonHMM(2)
    t = time.perf_counter()
    params = model.fit(x)
    first = time.perf_counter() - t
    params, ours_s = _least(lambda: model.fit(x), 3)
    out = {"T": T, "ours_first_call_s": first, "ours_s": ours_s,
           "ours_loglik": _hmmlearn_score(x, params.initial_probs, params.transition_matrix,
                                          params.rates),
           "ours_peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20}
    try:
        from hmmlearn import hmm
        with _one_thread():
            ref, peer_s = _least(lambda: hmm.PoissonHMM(n_components=2, random_state=0,
                                                        n_iter=1000, tol=1e-6).fit(
                x.astype(int).reshape(-1, 1)), 3)
        out.update(peer="hmmlearn PoissonHMM", peer_s=peer_s, ratio=ours_s / peer_s,
                   peer_iterations=int(ref.monitor_.iter),
                   peer_loglik=_hmmlearn_score(x, ref.startprob_, ref.transmat_,
                                               ref.lambdas_.ravel()))
        out["loglik_rel_diff"] = (abs(out["ours_loglik"] - out["peer_loglik"])
                                  / abs(out["peer_loglik"]))
        out["targets"] = {"within_1.5x_hmmlearn": out["ratio"] <= 1.5,
                          "same_loglik_1e-6": out["loglik_rel_diff"] <= 1e-6}
    except ImportError:
        out["peer"] = "hmmlearn not installed"
    out["dynamax"] = _dynamax_poisson(x)
    return out


def _dynamax_poisson(x):
    """dynamax's PoissonHMM fitted by its EM (100 iterations, its default initialisation
    from a key), warm (the least of 3 after a compiling call)."""
    try:
        import jax
        import jax.numpy as jnp
        from dynamax.hidden_markov_model import PoissonHMM
    except ImportError:
        return "dynamax not installed"
    hmm = PoissonHMM(num_states=2, emission_dim=1)
    emissions = jnp.asarray(x).reshape(-1, 1)
    params, props = hmm.initialize(jax.random.PRNGKey(0), method="prior")

    def fit():
        p, lps = hmm.fit_em(params, props, emissions, num_iters=100, verbose=False)
        jax.block_until_ready(p)
        return p, lps
    t = time.perf_counter()
    fit()
    first = time.perf_counter() - t
    (p, lps), secs = _least(fit, 3)
    return {"first_call_s": first, "s": secs, "iterations": 100,
            "loglik": _hmmlearn_score(x, p.initial.probs, p.transitions.transition_matrix,
                                      p.emissions.rates.ravel())}


def poisson_hmm_1e5(quick):
    return _poisson_hmm(100_000, quick)


def poisson_hmm_1e6(quick):
    return _poisson_hmm(1_000_000, quick)


def gaussian_hmm_1500(quick):
    """GaussianHMM(3), T = 1,500: our fit (4 starts) against hmmlearn's with its defaults
    (10 EM iterations, tol 0.01: what a user gets) and run to convergence (1,000
    iterations, tol 1e-6); every fit's log-likelihood by hmmlearn's ``score``."""
    import numpy as np
    import approxcv as acv
    from startup import simulate
    x = simulate(1500)
    model = acv.models.GaussianHMM(3)
    model.fit(x)
    params, ours_s = _least(lambda: model.fit(x), 3)
    out = {"T": 1500, "ours_s": ours_s, "ours_method": model.fit_result_["method"]}
    try:
        from hmmlearn import hmm
    except ImportError:
        return {**out, "peer": "hmmlearn not installed"}

    def score(startprob, transmat, means, variances):
        m = hmm.GaussianHMM(3, covariance_type="diag", init_params="", params="")
        m.startprob_, m.transmat_ = np.asarray(startprob), np.asarray(transmat)
        m.means_, m.covars_ = np.asarray(means), np.asarray(variances)
        return float(m.score(x))
    out["ours_loglik"] = score(params.initial_probs, params.transition_matrix, params.means,
                               params.variances)
    for key, kw in (("default", {}), ("converged", {"n_iter": 1000, "tol": 1e-6})):
        with _one_thread():
            ref, secs = _least(lambda: hmm.GaussianHMM(3, covariance_type="diag",
                                                       random_state=0, **kw).fit(x), 3)
        out[f"peer_{key}_s"] = secs
        out[f"peer_{key}_iterations"] = int(ref.monitor_.iter)
        out[f"peer_{key}_loglik"] = score(ref.startprob_, ref.transmat_, ref.means_,
                                          np.stack([np.diag(c) for c in ref.covars_]))
    out.update(peer="hmmlearn GaussianHMM (diag), defaults", peer_s=out["peer_default_s"],
               ratio=ours_s / out["peer_default_s"],
               ratio_to_converged=ours_s / out["peer_converged_s"],
               targets={"warm_fit_no_slower": ours_s <= out["peer_default_s"],
                        "warm_fit_no_slower_than_converged": ours_s <= out["peer_converged_s"]})
    return out


def lwcv_ij_1e6(quick):
    import approxcv as acv
    T = 1_000_000 if not quick else 10_000
    x = _two_regime_counts(T)
    model = acv.models.PoissonHMM(2)
    params = model.fit(x)
    folds = acv.folds.iid(T, 0.1, 1000 if not quick else 50, seed=0)
    t = time.perf_counter()
    res = acv.cross_validate(model, x, folds, "ij", params=params, progress=False, warn=False)
    secs = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20
    return {"T": T, "n_folds": len(folds), "ours_s": secs, "peak_rss_gb": peak,
            "stage_seconds": dict(res.stage_seconds),
            "targets": {"le_20s": secs <= 20.0, "peak_le_2gb": peak <= 2.0}}


def loo_ij_2e5(quick):
    import numpy as np

    import approxcv as acv
    from approxcv.engine.batching import _heldout
    from approxcv.engine.windows import WINDOW_MIN_WORK
    from approxcv.problem import make_problem
    T = 200_000 if not quick else 20_000
    x = _two_regime_counts(T)
    model = acv.models.PoissonHMM(2)
    params = model.fit(x)
    folds = acv.folds.leave_one_out(T)
    t = time.perf_counter()
    res = acv.cross_validate(model, x, folds, "ij", params=params, progress=True, warn=False)
    secs = time.perf_counter() - t
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20
    # 200 seeded folds by the full passes (what every fold cost before the windows)
    rows = np.sort(np.random.default_rng(0).choice(T, 200, replace=False))
    problem = make_problem(model, x, params)
    t = time.perf_counter()
    full, _ = _heldout(problem.heldout, np.asarray(res.params_flat)[rows],
                       folds.padded()[rows], problem.data, T, 8)
    full = np.asarray(full)
    full_s = time.perf_counter() - t
    return {"T": T, "n_folds": len(folds), "ours_s": secs, "peak_rss_gb": peak,
            "stage_seconds": dict(res.stage_seconds),
            "heldout_windows": res.diagnostics.get("heldout_windows"),
            "error_estimate_windows": res.diagnostics.get("error_estimate_windows"),
            "window_min_work": WINDOW_MIN_WORK,
            "n_unreliable": len(res.diagnostics["unreliable_folds"]),
            "max_rel_diff_vs_full_pass": float(np.max(np.abs(res.fold_loss[rows] - full)
                                                      / np.abs(full))),
            "full_pass_s_per_fold": full_s / rows.size,
            "targets": {"le_300s": secs <= 300.0}}


def hidden_potts_pgmpy(quick):
    import approxcv as acv
    from mrf_sids import marginal_likelihood_timing
    d = acv.datasets.load_sids()
    out = marginal_likelihood_timing(d, (d.sids74, d.births74 / 1000.0), quick)
    if "speedup_vs_pgmpy" in out:
        out["ratio"] = 1.0 / out["speedup_vs_pgmpy"]
        out["targets"] = {"ge_100x_faster": out["speedup_vs_pgmpy"] >= 100,
                          "same_value_1e-8": out["relative_difference"] <= 1e-8}
    return out


PAIRS = {f.__name__: f for f in (logistic_tuning_bbai, logistic_loo_sklearn, poisson_hmm_1e5,
                                 poisson_hmm_1e6, gaussian_hmm_1500, lwcv_ij_1e6,
                                 loo_ij_2e5, hidden_potts_pgmpy)}


def recorded():
    """Pairs from the family benchmarks' last recorded runs (not re-run here)."""
    out = {}
    for name, key, read in (
            ("crf_crfsuite", "sklearn-crfsuite", lambda d: {
                k: v for k, v in d.items() if any(s in k for s in ("ratio", "seconds", "speed"))
                and not isinstance(v, (list, dict))}),
            ("bayes_loo", "GPy", lambda d: d.get("gpy_pima"))):
        path = os.path.join(RESULTS, name + ".json")
        if os.path.exists(path):
            with open(path) as f:
                out[key] = {"source": f"benchmarks/results/{name}.json", **(read(json.load(f))
                                                                             or {})}
    return out


def run_pair(name, quick, cache_home):
    """Run one pair in a fresh interpreter (``cache_home`` ``None``: the compilation
    cache off) and return its JSON."""
    env = dict(os.environ)
    if cache_home is None:
        env["APPROXCV_NO_COMPILATION_CACHE"] = "1"
    else:
        env["XDG_CACHE_HOME"] = cache_home
    cmd = [sys.executable, os.path.abspath(__file__), "--pair", name] + (["--quick"] if quick
                                                                         else [])
    t = time.perf_counter()
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        return {"error": proc.stderr[-2000:], "wall_s": time.perf_counter() - t}
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    out["wall_s"] = time.perf_counter() - t
    return out


def table(out) -> str:
    """The Markdown table of the README."""
    lines = ["| pair | approxcv | peer | ratio (ours / peer) | agreement | targets |",
             "| ---- | ---- | ---- | ---- | ---- | ---- |"]
    for name, r in out["pairs"].items():
        if "error" in r:
            lines.append(f"| {name} | error | | | | |")
            continue
        ours = f"{r.get('ours_s', r.get('seconds', float('nan'))):.3g} s"
        peer = (f"{r['peer']}: {r['peer_s']:.3g} s" if "peer_s" in r
                else r.get("peer", "—"))
        if "pgmpy_seconds" in r:
            peer = f"pgmpy: {r['pgmpy_seconds']:.3g} s"
        ratio = f"{r['ratio']:.3g}" if "ratio" in r else "—"
        agree = ", ".join(f"{k} {r[k]:.2g}" for k in ("C_rel_diff", "loglik_rel_diff",
                                                      "relative_difference") if k in r)
        tg = ", ".join(f"{k}: {'met' if v else 'missed'}" for k, v in r.get("targets", {})
                       .items())
        lines.append(f"| {name} | {ours} | {peer} | {ratio} | {agree} | {tg} |")
    for key, r in out.get("recorded", {}).items():
        lines.append(f"| {key} (recorded) | see `{r['source']}` | | | | |")
    return "\n".join(lines) + "\n"


def main(quick):
    out = {"quick": quick, "pairs": {}}
    with tempfile.TemporaryDirectory() as cache:
        for name in PAIRS:
            print(name, flush=True)
            out["pairs"][name] = run_pair(name, quick, cache)
            write_json("peers", quick, out)
    out["recorded"] = recorded()
    stem = write_json("peers", quick, out)
    with open(stem + ".md", "w") as f:
        f.write(table(out))
    print(table(out))
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--pair", choices=sorted(PAIRS))
    ap.add_argument("--merge", action="store_true")
    a = ap.parse_args()
    if a.pair and a.merge:
        path = os.path.join(RESULTS, "peers" + ("_quick" if a.quick else "") + ".json")
        with open(path) as f:
            out = json.load(f)
        with tempfile.TemporaryDirectory() as cache:
            out["pairs"][a.pair] = run_pair(a.pair, a.quick, cache)
        stem = write_json("peers", a.quick, out)
        with open(stem + ".md", "w") as f:
            f.write(table(out))
        print(table(out))
    elif a.pair:
        import warnings
        warnings.simplefilter("ignore")
        print(json.dumps(PAIRS[a.pair](a.quick), default=float))
    else:
        main(a.quick)
