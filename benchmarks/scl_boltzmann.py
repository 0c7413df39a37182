"""Stochastic composite likelihood on Boltzmann machines: the seed's Figures 1-3, the Monte
Carlo check of the asymptotic variance, and PL1 vs FL fit and LOO times on 16 nodes.

* Figure 1 (m = 5, theta = (-1 x5, +1 x5)): FL, PL1 and 0.7 PL1 + 0.3 PL2 — per-sample
  expected FLOPs (approxcv.composite.cost's rule) and the exact asymptotic variance relative
  to the MLE's (det, eq. 12, and trace), in the corrected form and as eq. 17 is printed.
* Figure 2 (m = 5): trace and det of the asymptotic variance relative to the MLE's against
  alpha for alpha PL2 + (1 - alpha) PL1, alpha PL3 + (1 - alpha) PL2, alpha PL4 + (1 - alpha)
  PL3 (the higher order selected w.p. alpha, the lower w.p. 1 - alpha), exact by
  enumeration.
* Figure 3 (m = 9): cost vs normalised variance over grids of (lambda1, lambda2, beta1) for
  the PL1/PL2, PL1/PL3, PL2/PL3 families with the FL cost line, and the lower-left
  (Pareto) frontier of every policy (pure PL1 and PL2 included), in the corrected and the
  printed form.
* Monte Carlo (m = 5): X and Z redrawn R times, the spread of sqrt(n) (theta_hat - theta0)
  against the exact corrected and printed asymptotic variances, and the mean of each
  sandwich estimate.
* Timing (m = 16, n = 10^4): wall time of the PL1 and FL fits (compiled beforehand), the IJ
  over all n leave-one-out folds (derivatives, factor, solve and held-out losses; the
  per-fold error estimate of ``cross_validate`` is timed separately on 200 folds: it costs
  two gradients over all data per fold, O(n^2) for leave-one-out), and exact refits of 16
  folds (per-fold time; the whole LOO extrapolated from it, labelled so), as ratios
  measured in this run.

Usage: python benchmarks/scl_boltzmann.py [--quick]
"""
from __future__ import annotations

import time

import numpy as np

import approxcv as acv
import approxcv.composite as scl

try:
    from _common import figure, run, run_stages, save_figure, write_results
except ImportError:                                   # run as a module from the repo root
    from benchmarks._common import figure, run, run_stages, save_figure, write_results


def seed_theta(m):
    """Half the couplings -1, half +1 (the seed's §3.1 / §8.1 choice)."""
    d = m * (m - 1) // 2
    return np.r_[-np.ones(d // 2), np.ones(d - d // 2)]


def relative(bm, policy, theta, mle, form):
    """``{"det", "trace", "det_per_param"}`` of the exact asymptotic variance vs the MLE's."""
    v = scl.asymptotic_variance(bm, policy, theta, form)
    ld = np.linalg.slogdet(v)[1] - np.linalg.slogdet(mle)[1]
    return {"det": float(np.exp(ld)), "trace": float(np.trace(v) / np.trace(mle)),
            "det_per_param": float(np.exp(ld / len(theta)))}


def pl(bm, k):
    return scl.pseudo_likelihood(bm, k)


def figure1(m=5):
    bm, theta = scl.BoltzmannMachine(m), seed_theta(m)
    mle = scl.asymptotic_variance(bm, scl.Policy(scl.full_likelihood(bm)), theta)
    policies = {"FL": scl.Policy(scl.full_likelihood(bm)), "PL1": scl.Policy(pl(bm, 1)),
                "0.7PL1+0.3PL2": scl.Policy([pl(bm, 1), pl(bm, 2)], select=[0.7, 0.3])}
    X = bm.sample(theta, 14, seed=0)
    out = {}
    for name, pol in policies.items():
        z = scl.draw_selection(pol, 14, seed=0)
        c = scl.component_costs(bm, pol)
        out[name] = {"cost_per_sample": scl.expected_cost(bm, pol, 1),
                     "realised_cost_14": float(np.sum(z @ c)),
                     "realised_per_sample": (z @ c).tolist(),
                     "corrected": relative(bm, pol, theta, mle, "corrected"),
                     "paper": relative(bm, pol, theta, mle, "paper")}
    out["_X"] = X.tolist()
    return out


def figure2(m=5, alphas=None):
    bm, theta = scl.BoltzmannMachine(m), seed_theta(m)
    mle = scl.asymptotic_variance(bm, scl.Policy(scl.full_likelihood(bm)), theta)
    alphas = np.linspace(0.05, 1.0, 20) if alphas is None else alphas
    out = {"alpha": alphas.tolist(), "PL1": {f: relative(bm, scl.Policy(pl(bm, 1)), theta,
                                                         mle, f) for f in ("corrected", "paper")}}
    for lo in range(1, m - 1):
        hi = lo + 1
        fam = {}
        for form in ("corrected", "paper"):
            rows = []
            for a in alphas:
                pol = (scl.Policy([pl(bm, lo), pl(bm, hi)], select=[1 - a, a]) if a < 1
                       else scl.Policy(pl(bm, hi)))
                rows.append(relative(bm, pol, theta, mle, form))
            fam[form] = {k: [r[k] for r in rows] for k in rows[0]}
        out[f"PL{hi}/PL{lo}"] = fam
    return out


def pareto(cost, var):
    """Indices of the lower-left frontier (no other point cheaper and less variable)."""
    order = np.lexsort((var, cost))
    front, best = [], np.inf
    for i in order:
        if var[i] < best:
            front.append(int(i))
            best = var[i]
    return front


def figure3(m=9, lams=(0.1, 0.25, 0.5, 0.75, 1.0), betas=(0.1, 0.3, 0.5, 0.7, 0.9)):
    bm, theta = scl.BoltzmannMachine(m), seed_theta(m)
    mle = scl.asymptotic_variance(bm, scl.Policy(scl.full_likelihood(bm)), theta)
    out = {"fl_cost": scl.expected_cost(bm, scl.Policy(scl.full_likelihood(bm)), 1),
           "pure": {}}
    for k in (1, 2):
        out["pure"][f"PL{k}"] = {"cost": scl.expected_cost(bm, scl.Policy(pl(bm, k)), 1),
                                 **relative(bm, scl.Policy(pl(bm, k)), theta, mle, "corrected")}
    for lo, hi in ((1, 2), (1, 3), (2, 3)):
        rows = []
        for l1 in lams:
            for l2 in lams:
                for b1 in betas:
                    pol = scl.Policy([pl(bm, lo), pl(bm, hi)], select=[l1, l2],
                                     weight=[b1, 1 - b1])
                    r = {f: relative(bm, pol, theta, mle, f) for f in ("corrected", "paper")}
                    rows.append({"lambda1": l1, "lambda2": l2, "beta1": b1,
                                 "cost": scl.expected_cost(bm, pol, 1),
                                 "det_corrected": r["corrected"]["det_per_param"],
                                 "det_paper": r["paper"]["det_per_param"]})
        out[f"PL{lo}/PL{hi}"] = rows
    out.update(frontiers(out))
    return out


def frontiers(fig3):
    """Lower-left frontiers of cost against the corrected and the printed variance over
    every policy of Figure 3, the pure PL1 and PL2 included."""
    rows = [{"family": f, **r} for f in fig3 if "/" in f for r in fig3[f]]
    rows += [{"family": k, "cost": v["cost"], "det_corrected": v["det_per_param"],
              "det_paper": v["det_per_param"]} for k, v in fig3["pure"].items()]
    cost = np.array([r["cost"] for r in rows])
    return {key: [rows[i] for i in pareto(cost, np.array([r[form] for r in rows]))]
            for key, form in (("frontier", "det_corrected"), ("frontier_paper", "det_paper"))}


def monte_carlo(m=5, n=1000, reps=300):
    """Spread of the estimates over redrawn X and Z vs the two asymptotic variances."""
    bm, theta = scl.BoltzmannMachine(m), seed_theta(m)
    policies = {"0.3 PL1": scl.Policy(pl(bm, 1), select=0.3),
                "0.7PL1+0.3PL2": scl.Policy([pl(bm, 1), pl(bm, 2)], select=[0.7, 0.3])}
    out = {"n": n, "reps": reps}
    for name, pol in policies.items():
        est, sand = [], {"corrected": [], "paper": []}
        t = time.perf_counter()
        for r in range(reps):
            X = bm.sample(theta, n, seed=1000 + r)
            f = scl.fit(bm, X, pol, seed=r)
            est.append(f.theta)
            if r < 50:
                for form in sand:
                    sand[form].append(f.variance(form) * n)
        est = np.array(est)
        emp = np.cov((est - theta).T) * n
        exact = {f: scl.asymptotic_variance(bm, pol, theta, f) for f in ("corrected", "paper")}
        row = {"seconds": time.perf_counter() - t,
               "mean_bias": float(np.abs(est.mean(0) - theta).max()),
               "empirical_trace": float(np.trace(emp))}
        for f in exact:
            row[f"{f}_trace"] = float(np.trace(exact[f]))
            row[f"empirical_over_{f}_trace"] = float(np.trace(emp) / np.trace(exact[f]))
            row[f"empirical_over_{f}_det_per_param"] = float(np.exp(
                (np.linalg.slogdet(emp)[1] - np.linalg.slogdet(exact[f])[1]) / len(theta)))
            row[f"sandwich_{f}_mean_trace"] = float(np.trace(np.mean(sand[f], 0)))
            # per-parameter variance ratios empirical / exact
            row[f"diag_ratio_{f}"] = (np.diag(emp) / np.diag(exact[f])).tolist()
        # standard error of the empirical trace (chi-square-like), for reading the ratios
        row["trace_rel_se"] = float(np.sqrt(2.0 / (reps - 1)))
        out[name] = row
    return out


def ij_core(model, data, params, folds):
    """``(fold_loss, seconds)`` of the IJ proper over ``folds`` — derivatives, one factor,
    the batched solve and every held-out loss — through the registered method and the
    engine's held-out evaluation (``cross_validate`` adds a per-fold error estimate, two
    gradients over all data per fold, which is O(n^2) for leave-one-out)."""
    from approxcv.engine import get_method
    from approxcv.engine.heldout import heldout_losses
    from approxcv.engine.options import Options
    problem = acv.make_problem(model, data, params)
    t = time.perf_counter()
    flat, _ = get_method("ij")[0](problem, folds, Options(progress=False, warn=False))
    fold_loss, _ = heldout_losses(problem, flat, folds.padded(), None)
    return np.asarray(fold_loss), time.perf_counter() - t


def timing(m=16, n=10_000, n_exact=16, n_estimate=200):
    """PL1 vs FL on an m-node machine: fit times (compiled beforehand), the IJ over all n
    leave-one-out folds, the IJ with its error estimates on ``n_estimate`` folds, exact
    refits of ``n_exact`` folds (and the whole LOO extrapolated from them)."""
    bm = scl.BoltzmannMachine(m)
    rng = np.random.default_rng(0)
    theta = rng.normal(0.0, 0.3, size=bm.n_params)
    X = bm.sample(theta, n, seed=1)
    out = {"m": m, "n": n, "n_params": bm.n_params, "n_exact": n_exact,
           "n_estimate": n_estimate}
    folds = acv.folds.leave_one_out(n)
    checked = np.linspace(0, n - 1, n_exact).astype(int)
    for name, pol in (("PL1", scl.Policy(pl(bm, 1))),
                      ("FL", scl.Policy(scl.full_likelihood(bm)))):
        scl.fit(bm, X, pol, max_steps=2000)           # compile
        f = scl.fit(bm, X, pol, max_steps=2000)
        kw = dict(params=f.params, progress=False, warn=False)
        ij_core(f.model, f.data, f.params, folds.subset([0, 1]))          # compile
        loss, ij_s = ij_core(f.model, f.data, f.params, folds)
        est = folds.subset(list(range(n_estimate)))
        acv.cross_validate(f.model, f.data, est.subset([0, 1]), "ij", **kw)
        t = time.perf_counter()
        acv.cross_validate(f.model, f.data, est, "ij", **kw)
        est_s = time.perf_counter() - t
        sub = folds.subset(checked.tolist())
        acv.cross_validate(f.model, f.data, sub.subset([0]), "exact", restarts=0, **kw)
        t = time.perf_counter()
        ex = acv.cross_validate(f.model, f.data, sub, "exact", restarts=0, **kw)
        ex_s = time.perf_counter() - t
        rel = np.abs(loss[checked] - ex.fold_loss) / np.abs(ex.fold_loss)
        out[name] = {"fit_seconds": f.seconds, "expected_gflops": f.expected_cost / 1e9,
                     "fit_converged": f.model.fit_result_["converged"],
                     "fit_steps": f.model.fit_result_["num_steps"],
                     "ij_loo_seconds": ij_s,
                     "ij_with_error_estimate_seconds_per_fold": est_s / n_estimate,
                     "exact_seconds_per_fold": ex_s / n_exact,
                     "exact_loo_seconds_extrapolated": ex_s / n_exact * n,
                     "exact_over_ij_extrapolated": ex_s / n_exact * n / ij_s,
                     "exact_converged": int(ex.diagnostics["exact_converged"].sum()),
                     "ij_vs_exact_max_rel_fold_loss": float(rel.max()),
                     "ij_cv_loss": float(loss.mean())}
    out["fl_over_pl1_fit_time"] = out["FL"]["fit_seconds"] / out["PL1"]["fit_seconds"]
    out["fl_over_pl1_ij_time"] = out["FL"]["ij_loo_seconds"] / out["PL1"]["ij_loo_seconds"]
    out["fl_over_pl1_exact_time"] = (out["FL"]["exact_seconds_per_fold"]
                                     / out["PL1"]["exact_seconds_per_fold"])
    return out


def main(quick: bool):
    t0 = time.perf_counter()
    out = {"quick": quick}
    stages = (("figure1", figure1), ("figure2", lambda: figure2(
        alphas=np.linspace(0.1, 1.0, 4) if quick else None)),
        ("figure3", lambda: figure3(6, (0.25, 1.0), (0.3, 0.7)) if quick else figure3()),
        ("monte_carlo", lambda: monte_carlo(reps=20 if quick else 300)),
        ("timing", lambda: timing(10, 2000, 8, 20) if quick else timing()))
    run_stages("scl_boltzmann", quick, out, stages)
    out["seconds"] = time.perf_counter() - t0
    stem = write_results("scl_boltzmann", quick, out, plot)
    print(f"wrote {stem}.json/.png in {out['seconds']:.0f} s")
    return out


def plot(out, path):
    fig, axes = figure(2, 3, figsize=(16, 9))
    f1 = out["figure1"]
    names = [k for k in f1 if not k.startswith("_")]
    ax = axes[0, 0]
    x = np.arange(len(names))
    ax.bar(x - 0.2, [f1[k]["cost_per_sample"] for k in names], 0.4, label="FLOPs / sample")
    ax2 = ax.twinx()
    ax2.bar(x + 0.2, [f1[k]["corrected"]["det"] for k in names], 0.2, color="C1",
            label="det ratio (corrected)")
    ax2.bar(x + 0.4, [f1[k]["paper"]["det"] for k in names], 0.2, color="C2",
            label="det ratio (eq. 17 printed)")
    ax.set_xticks(x, names)
    ax.set_title("Fig. 1: cost and variance vs MLE (m = 5)")
    ax.legend(loc="upper left", fontsize=7)
    ax2.legend(loc="upper right", fontsize=7)
    f2 = out["figure2"]
    for col, key in ((1, "trace"), (2, "det")):
        ax = axes[0, col]
        for i, fam in enumerate(k for k in f2 if "/" in k):
            ax.plot(f2["alpha"], f2[fam]["corrected"][key], color=f"C{i}", label=f"{fam}")
            ax.plot(f2["alpha"], f2[fam]["paper"][key], color=f"C{i}", ls="--")
        ax.axhline(1.0, color="k", lw=0.5)
        ax.set_xlabel("alpha (selection probability of the higher order)")
        ax.set_ylabel(f"{key} Var / {key} Var(MLE)")
        ax.set_yscale("log")
        ax.set_title(f"Fig. 2: {key} (solid corrected, dashed printed eq. 17)")
        ax.legend(fontsize=7)
    f3 = out["figure3"]
    ax = axes[1, 0]
    for i, fam in enumerate(k for k in f3 if "/" in k):
        ax.scatter([r["det_corrected"] for r in f3[fam]], [r["cost"] for r in f3[fam]], s=8,
                   color=f"C{i}", label=fam, alpha=0.6)
    fr = f3["frontier"]
    ax.plot([r["det_corrected"] for r in fr], [r["cost"] for r in fr], "k-", lw=1,
            label="frontier")
    fp = f3.get("frontier_paper", [])
    ax.plot([r["det_paper"] for r in fp], [r["cost"] for r in fp], "k:", lw=1,
            label="frontier, printed eq. 17")
    for k, r in f3["pure"].items():
        ax.scatter([r["det_per_param"]], [r["cost"]], color="k", s=40)
        ax.annotate(k, (r["det_per_param"], r["cost"]))
    ax.axhline(f3["fl_cost"], ls="--", color="k", label="FL cost")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("(det Var / det Var(MLE))^(1/D)  (corrected)")
    ax.set_ylabel("FLOPs per sample")
    ax.set_title("Fig. 3: cost vs variance")
    ax.legend(fontsize=7)
    mc = out["monte_carlo"]
    ax = axes[1, 1]
    pols = [k for k in mc if k not in ("n", "reps")]
    x = np.arange(len(pols))
    ax.bar(x - 0.25, [mc[p]["empirical_trace"] for p in pols], 0.25, label="Monte Carlo")
    ax.bar(x, [mc[p]["corrected_trace"] for p in pols], 0.25, label="corrected")
    ax.bar(x + 0.25, [mc[p]["paper_trace"] for p in pols], 0.25, label="eq. 17 printed")
    ax.set_xticks(x, pols)
    ax.set_ylabel("trace of n Cov(theta_hat)")
    ax.set_title(f"Monte Carlo, {mc['reps']} redraws of X and Z, n = {mc['n']}")
    ax.legend(fontsize=7)
    tm = out["timing"]
    ax = axes[1, 2]
    labels = ["fit", "IJ LOO", "exact LOO (extrap.)"]
    for i, name in enumerate(("PL1", "FL")):
        vals = [tm[name]["fit_seconds"], tm[name]["ij_loo_seconds"],
                tm[name]["exact_loo_seconds_extrapolated"]]
        ax.bar(np.arange(3) + 0.4 * i, vals, 0.4, label=name)
    ax.set_xticks(np.arange(3) + 0.2, labels)
    ax.set_yscale("log")
    ax.set_ylabel("seconds")
    ax.set_title(f"m = {tm['m']}, n = {tm['n']}")
    ax.legend(fontsize=7)
    save_figure(fig, path, "Stochastic composite likelihood, Boltzmann machines")


if __name__ == "__main__":
    run(main, __doc__)
