"""Hidden Potts models on North Carolina SIDS counts: leave-one-county-out IJ vs exact CV.

A 2-state hidden Potts model with Poisson emissions (SIDS deaths 1974-78, exposure: live
births / 1,000) on the county contiguity graph (100 counties, 231 edges; structured-CV
paper, §5 and L.3, seed Fig. 3 layout). For each of four connection strengths beta: the fit
(EM), then IJ and exact CV (Newton refits warm-started at the fit) over all 100
leave-one-county-out folds, scheme A; per-site held-out losses, their relative errors, and
the warm wall time of each (compilation excluded, both measured in this run): the IJ's
whole call (with its per-fold error estimate) and its core (derivatives, solve and all
held-out losses). beta is chosen by IJ and by exact CV. At the middle
beta also spatial blocks (a county with its neighbours) and scheme B. The exact marginal
likelihood of a 3-state model is timed against pgmpy's VariableElimination (with our
min-fill order) on the same Markov network and query, if pgmpy is installed (``pip install pgmpy``: a
benchmark-only dependency), with the induced widths of the SIDS and Columbus graphs. With
the full run, Columbus crime (49 neighbourhoods, Gaussian emissions) gets the same IJ vs
exact comparison. Targets are reported, not asserted.

Usage: python benchmarks/mrf_sids.py [--quick]
"""
from __future__ import annotations

import time

import jax
import jax.numpy as jnp
import numpy as np

import approxcv as acv
from approxcv.inference import elimination

try:
    from _common import figure, run, save_figure, write_results
except ImportError:                                   # run as a module from the repo root
    from benchmarks._common import figure, run, save_figure, write_results

BETAS = (0.25, 0.5, 0.75, 1.0)


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


#: warm calls of each method; each time and stage time is the least over them (a shared
#: 2-core machine: single calls of 20 ms varied 2x between runs)
REPEATS = 3


def cv_pair(model, data, params, folds, scheme="A"):
    """IJ and exact CV on ``folds``, each timed warm: the IJ after a first (compiling) call
    on the same folds, exact after a warm-up call on two folds (the compiled programs are
    shared: exact refits run in fixed-shape padded batches); then ``REPEATS`` calls of
    each, alternating, every time and stage time the least over them."""
    kw = dict(params=params, scheme=scheme, progress=False, warn=False)
    methods = (("ij", {}, folds), ("exact", {"restarts": 0}, folds.subset([0, 1])))
    cold = {m: acv.cross_validate(model, data, warm, m, **kw, **extra).seconds
            for m, extra, warm in methods}
    runs = {m: [] for m, _, _ in methods}
    for _ in range(REPEATS):
        for m, extra, _ in methods:
            runs[m].append(acv.cross_validate(model, data, folds, m, **kw, **extra))
    seconds = {m: min(r.seconds for r in rs) for m, rs in runs.items()}
    stages = {m: {k: min(r.stage_seconds[k] for r in rs) for k in rs[0].stage_seconds}
              for m, rs in runs.items()}
    ij, ex = runs["ij"][0], runs["exact"][0]
    rel = np.abs(ij.fold_loss - ex.fold_loss) / np.abs(ex.fold_loss)
    # the IJ proper: derivatives, the IJ solve and every held-out loss (its per-fold error
    # estimate, two more gradients a fold, is an extra diagnostic stage)
    core = sum(v for k, v in stages["ij"].items() if k != "error_estimate")
    return {"ij_seconds": seconds["ij"], "exact_seconds": seconds["exact"],
            "speedup": seconds["exact"] / seconds["ij"], "ij_core_seconds": core,
            "speedup_ij_core": seconds["exact"] / core,
            "ij_seconds_first_call": cold["ij"], "repeats": REPEATS,
            "ij_stage_seconds": stages["ij"],
            "exact_stage_seconds": stages["exact"],
            "mean_relative_error": float(rel.mean()), "max_relative_error": float(rel.max()),
            "exact_converged": int(ex.diagnostics["exact_converged"].sum()),
            "ij_cv_loss": float(ij.fold_loss.mean()), "exact_cv_loss": float(ex.fold_loss.mean()),
            "ij_fold_loss": ij.fold_loss.tolist(), "exact_fold_loss": ex.fold_loss.tolist()}


def pgmpy_marginal_likelihood(adjacency, log_lik, beta, order, repeats=5):
    """``(log p(x), seconds)`` by pgmpy's VariableElimination on the same network and
    elimination ``order`` (ours: pgmpy's own "MinFill" built a 23-variable factor, 701 GiB,
    on this graph): ``log Z(x) - log Z_field``, each a query of the last variable's
    unnormalised factor. ``log Z_field`` does not depend on the data or the rates, so it
    is computed once, as the model caches it; the seconds are the least of ``repeats``
    queries of ``log Z(x)`` (network built and queried, as a user would)."""
    from pgmpy.factors.discrete import DiscreteFactor
    from pgmpy.inference import VariableElimination
    try:
        from pgmpy.models import DiscreteMarkovNetwork as MarkovNetwork
    except ImportError:
        from pgmpy.models import MarkovNetwork
    n, k = log_lik.shape
    edges = [(s, t) for s in range(n) for t in range(s + 1, n) if adjacency[s, t]]
    shift = log_lik.max(1)

    def log_z(unary):
        net = MarkovNetwork([(f"z{s}", f"z{t}") for s, t in edges])
        net.add_factors(*[DiscreteFactor([f"z{t}"], [k], np.exp(unary[t])) for t in range(n)],
                        *[DiscreteFactor([f"z{s}", f"z{t}"], [k, k], np.exp(beta * np.eye(k)))
                          for s, t in edges])
        q = VariableElimination(net).query([f"z{order[-1]}"],
                                           elimination_order=[f"z{v}" for v in order[:-1]],
                                           show_progress=False)
        return float(np.log(q.values.sum()))
    field = log_z(np.zeros((n, k)))
    times = [timed(lambda: log_z(log_lik - shift[:, None]))
             for _ in range(repeats)]
    return times[0][0] + shift.sum() - field, min(t for _, t in times)


def marginal_likelihood_timing(d, data, quick):
    """Exact ``log p(x)`` of a 3-state model: approxcv (compiled; best of 20 warm calls,
    the field's normaliser a cached constant of the model) against pgmpy on the same model
    and query (its normaliser computed once too)."""
    model = acv.models.HiddenPotts(d.adjacency, 3, beta=0.5, n_init=2)
    params = model.fit(data)
    prepared, _, _ = model.prepare(data)
    fn = jax.jit(lambda p: model.log_marginal_likelihood(p, prepared))
    p = jax.tree_util.tree_map(jnp.asarray, params)
    _, compile_s = timed(lambda: fn(p).block_until_ready())
    times = [timed(lambda: fn(p).block_until_ready())[1] for _ in range(20)]
    ours = float(fn(p))
    out = {"log_marginal_likelihood": ours, "compile_and_first_call_seconds": compile_s,
           "seconds": float(np.min(times)), "seconds_median": float(np.median(times)),
           "rates": np.asarray(params.rates).tolist(), "induced_width": model.induced_width}
    try:
        log_lik = np.asarray(model.emission_log_lik(p, prepared))
        value, secs = pgmpy_marginal_likelihood(d.adjacency, log_lik, 0.5, model.plan_.order)
        out.update(pgmpy_log_marginal_likelihood=value, pgmpy_seconds=secs,
                   speedup_vs_pgmpy=secs / out["seconds"],
                   relative_difference=abs(value - ours) / abs(ours))
    except ImportError:
        out["pgmpy"] = "not installed"
    return out


def main(quick: bool):
    d = acv.datasets.load_sids()
    data = (d.sids74, d.births74 / 1000.0)
    n = len(d.sids74)
    folds = acv.folds.leave_one_out(n) if not quick else acv.folds.Folds(
        [[i] for i in range(0, n, 10)], n)
    out = {"data": "NC SIDS 1974-78, deaths ~ Poisson(births/1000 * rate_k)", "n_sites": n,
           "n_edges": len(d.edges), "n_states": 2, "scheme": "A", "n_folds": len(folds),
           "quick": quick, "platform": jax.default_backend(), "betas": {}}
    out["marginal_likelihood_K3"] = marginal_likelihood_timing(d, data, quick)
    out["induced_width"] = {
        "sids": elimination.build_plan(n, [tuple(e) for e in d.edges]).width,
        "columbus": elimination.build_plan(49, [tuple(e) for e in
                                                acv.datasets.load_columbus().edges]).width}
    betas = BETAS[1:2] if quick else BETAS
    for beta in betas:
        model = acv.models.HiddenPotts(d.adjacency, 2, beta=beta, n_init=2)
        params, fit_s = timed(lambda: model.fit(data))
        cell = {"fit_seconds": fit_s, "rates": np.asarray(params.rates).tolist(),
                **cv_pair(model, data, params, folds)}
        if beta == 0.5 and not quick:
            blocks = acv.folds.neighbourhood(d.adjacency, radius=1)
            cell["blocks_radius1"] = {k: v for k, v in cv_pair(model, data, params, blocks)
                                      .items() if not k.endswith("fold_loss")}
            cell["scheme_B"] = {k: v for k, v in cv_pair(model, data, params, folds, "B")
                                .items() if not k.endswith("fold_loss")}
        out["betas"][str(beta)] = cell
        print(f"beta={beta}: IJ {cell['ij_seconds']:.3f}s (core {cell['ij_core_seconds']:.3f}s) "
              f"exact {cell['exact_seconds']:.2f}s x{cell['speedup']:.0f} (core "
              f"x{cell['speedup_ij_core']:.0f}), mean rel err "
              f"{cell['mean_relative_error']:.2e}", flush=True)
    cells = out["betas"]
    out["beta_by_ij"] = min(cells, key=lambda b: cells[b]["ij_cv_loss"])
    out["beta_by_exact"] = min(cells, key=lambda b: cells[b]["exact_cv_loss"])
    if not quick:
        out["columbus"] = columbus(betas)
    write_results("mrf_sids", quick, out, plot)
    return out


def columbus(betas):
    """Gaussian hidden Potts on Columbus crime: leave-one-neighbourhood-out IJ vs exact."""
    c = acv.datasets.load_columbus()
    folds = acv.folds.leave_one_out(len(c.crime))
    res = {}
    for beta in betas:
        model = acv.models.HiddenPotts(c.adjacency, 2, beta=beta, emission="gaussian",
                                       n_init=2)
        params = model.fit(c.crime)
        cell = cv_pair(model, c.crime, params, folds)
        res[str(beta)] = {k: v for k, v in cell.items() if not k.endswith("fold_loss")}
    return res


def plot(out, path):
    cells = out["betas"]
    betas = list(cells)
    fig, axes = figure(2, 3, figsize=(13, 7.5))
    ax = axes[0, 0]
    x = np.arange(len(betas))
    ax.bar(x - 0.2, [cells[b]["exact_seconds"] for b in betas], 0.4, label="exact CV")
    ax.bar(x + 0.2, [cells[b]["ij_seconds"] for b in betas], 0.4,
           label="IJ (with error estimate)")
    ax.scatter(x + 0.2, [cells[b]["ij_core_seconds"] for b in betas], c="k", marker="_",
               s=200, zorder=3, label="IJ core: derivatives + held-out")
    ax.set_yscale("log")
    ax.set_xticks(x, [f"beta={b}" for b in betas])
    ax.set_ylabel(f"seconds, {out['n_folds']} folds (warm)")
    ax.legend(fontsize=7, loc="center right")
    ax = axes[0, 1]
    ax.plot(betas, [cells[b]["exact_cv_loss"] for b in betas], "o-", label="exact CV")
    ax.plot(betas, [cells[b]["ij_cv_loss"] for b in betas], "s--", label="IJ")
    ax.set_xlabel("beta")
    ax.set_ylabel("mean held-out loss")
    ax.legend()
    for i, ax in enumerate(list(axes.ravel()[2:])):
        if i >= len(betas):
            ax.axis("off")
            continue
        cell = cells[betas[i]]
        ex, ij = np.array(cell["exact_fold_loss"]), np.array(cell["ij_fold_loss"])
        ax.scatter(ex, ij, s=10, c="tab:red")
        lim = [min(ex.min(), ij.min()), max(ex.max(), ij.max())]
        ax.plot(lim, lim, "k--", lw=1)
        ax.set_title(f"beta={betas[i]}: mean rel. err {cell['mean_relative_error']:.1e}")
        ax.set_xlabel("exact CV loss per site")
        ax.set_ylabel("IJ loss per site")
    save_figure(fig, path, "Hidden Potts on NC SIDS: leave-one-county-out IJ vs exact CV")


if __name__ == "__main__":
    run(main, __doc__)
