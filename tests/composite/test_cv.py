"""Cross-validation of SCL fits: IJ against exact refits, policy selection; the beta
heuristic against a direct computation. Every fit here shares one model structure (PL1 on
the 4-node machine of ``bm4``), so the whole module compiles one objective."""
import sys

import numpy as np
import pandas as pd
import pytest
import scipy.optimize

import approxcv as acv
import approxcv.composite as scl
from approxcv.errors import GridEntryWarning, InvalidDataError, NonIdentifiableWarning

from .conftest import THETA4, states, suff_stats

#: leave-one-sample-out folds checked by exact refits, in calls of three folds: the fold
#: count of the all-models table test (tests/test_protocol.py, n // 4, n // 2, 3n // 4), so
#: every fold-shaped program compiles once for both
CHECKED = ([37, 75, 112], [0, 60, 149], [20, 98, 130])


@pytest.fixture(scope="module")
def pl_fit(bm4):
    bm, X = bm4
    return scl.fit(bm, X, scl.Policy(scl.pseudo_likelihood(bm, 1), select=0.5), seed=1), X


def test_leave_one_sample_out_ij_agrees_with_exact_refits(pl_fit):
    fit, X = pl_fit
    loo = acv.folds.leave_one_out(len(X))
    kw = dict(params=fit.params, progress=False, warn=False)
    ij, ex = [], []
    for checked in CHECKED:
        folds = loo.subset(checked)
        ij.append(acv.cross_validate(fit.model, X, folds, "ij", **kw))
        ex.append(acv.cross_validate(fit.model, X, folds, "exact", restarts=0, **kw))
    assert all(e.diagnostics["exact_converged"].all() for e in ex)
    ij_p = np.concatenate([r.params_flat for r in ij])
    ex_p = np.concatenate([r.params_flat for r in ex])
    # one sample of 150 out: shifts up to ~0.1, the IJ's parameters within ~7 % of the
    # largest; fold losses within ~0.5 % (measured), asserted with room
    shift = np.abs(ex_p - fit.theta).max()
    err = np.abs(ij_p - ex_p).max()
    assert shift > 0.02 and err < 0.2 * shift, (shift, err)
    ij_l = np.concatenate([r.fold_loss for r in ij])
    ex_l = np.concatenate([r.fold_loss for r in ex])
    assert np.max(np.abs(ij_l - ex_l) / ex_l) < 0.02
    # the draws travel with the samples: the same folds in another order give the same
    # estimates, in that order
    back = acv.cross_validate(fit.model, X, loo.subset(CHECKED[0][::-1]), "ij", **kw)
    np.testing.assert_array_equal(back.fold_loss, ij[0].fold_loss[::-1])


def test_select_policy_ranks_like_exact_cv(bm4):
    """A Selection as acv.select's: one CVResult per policy ranked by acv.compare (paired
    standard errors), the policy's columns beside, and exact CV's ranking with check."""
    bm, X = bm4
    pl1 = scl.pseudo_likelihood(bm, 1)
    policies = {f"{lam} PL1": scl.Policy(pl1, select=lam) for lam in (1.0, 0.5, 0.2)}
    folds = acv.folds.leave_one_out(len(X)).subset(CHECKED[0])
    sel = scl.select_policy(bm, X, policies, folds, seed=1, check=True)
    assert isinstance(sel, acv.selection.Selection)
    df = sel.table
    assert set(df.index) == set(policies) == set(sel.results) == set(sel.exact_results)
    assert all(isinstance(r, acv.CVResult) and r.method == "ij" for r in sel.results.values())
    ranked = acv.compare(sel.results)
    pd.testing.assert_frame_equal(df[ranked.columns], ranked)
    assert list(df.columns[:9]) == ["rank", "elpd", "se", "elpd_diff", "dse", "n_units",
                                    "n_unreliable", "warning", "method"]
    assert {"position", "cost", "fit_seconds", "cv_seconds", "fit_converged", "exact_elpd",
            "exact_rank", "exact_seconds"} <= set(df.columns)
    # elpd: minus the held-out negative log-likelihoods of the 3 left-out samples
    for name, r in sel.results.items():
        assert df.loc[name, "elpd"] == pytest.approx(-np.sum(r.fold_loss), rel=1e-12)
    assert (df["se"] > 0).all() and df["dse"].iloc[0] == 0 and (df["dse"].iloc[1:] > 0).all()
    np.testing.assert_allclose(df["elpd"], df["exact_elpd"], rtol=1e-2)
    assert df["exact_rank"].tolist() == [0, 1, 2]     # the IJ's ranking is exact CV's
    assert sel.best == df.index[0] == "1.0 PL1"
    assert df.loc["0.5 PL1", "cost"] == pytest.approx(df.loc["1.0 PL1", "cost"] / 2)
    assert sel.hyperparameters["0.5 PL1"]["policy"] is policies["0.5 PL1"]
    assert sel.failures == {} and (df["flag"] == "").all()


def test_select_policy_gives_one_row_per_policy_even_when_labels_once_collided(bm4):
    """Rows are keyed by position: lambda 0.3 against 0.30001, two per-component vectors with
    the same range, and one policy listed twice are five rows with five names."""
    bm, X = bm4
    pl1 = scl.pseudo_likelihood(bm, 1)
    vec = [0.2, 0.5, 0.7, 0.9]
    policies = [scl.Policy(pl1, select=0.3), scl.Policy(pl1, select=0.30001),
                scl.Policy(pl1, select=[vec]), scl.Policy(pl1, select=[vec[::-1]]),
                scl.Policy(pl1, select=0.3)]
    folds = acv.folds.leave_one_out(len(X)).subset(CHECKED[0])
    sel = scl.select_policy(bm, X, policies, folds, seed=1)
    df = sel.table
    assert len(df) == 5 and df.index.is_unique
    assert sorted(df["position"]) == [0, 1, 2, 3, 4]
    by_pos = df.reset_index().set_index("position")
    assert by_pos.loc[0, "model"] == "PL1(lam=0.3, beta=1) [0]"
    assert by_pos.loc[4, "model"] == "PL1(lam=0.3, beta=1) [4]"
    assert by_pos.loc[1, "model"] == "PL1(lam=0.30001, beta=1)"
    # the same policy and seed give the same fit, in both of its rows
    np.testing.assert_array_equal(by_pos.loc[0, "elpd"], by_pos.loc[4, "elpd"])
    assert set(sel.params) == set(df.index)
    np.testing.assert_array_equal(sel.params["PL1(lam=0.3, beta=1) [0]"].theta,
                                  sel.params["PL1(lam=0.3, beta=1) [4]"].theta)
    assert df["fit_converged"].all()


def test_select_policy_flags_and_records_failing_policies(bm4, monkeypatch):
    """A policy whose data do not bound some parameters is ranked but flagged; one whose
    fit raises is recorded in its row (the others ranked); a GridEntryWarning names both;
    when every policy fails (data that are not 0/1), the common error class is raised."""
    bm, X = bm4
    pl1 = scl.Policy(scl.pseudo_likelihood(bm, 1))
    weak = scl.Policy(scl.user_components(bm, [((0,), (1,))], name="P0|1"))
    folds = acv.folds.leave_one_out(len(X)).subset(CHECKED[0])
    module = sys.modules["approxcv.composite.selection"]
    real_fit = module.fit

    def fit_or_raise(model, X, policy, **kw):
        if policy is weak:
            raise FloatingPointError("no luck")
        return real_fit(model, X, policy, **kw)
    monkeypatch.setattr(module, "fit", fit_or_raise)
    with pytest.warns(GridEntryWarning, match="1 of 2 policies failed.*FloatingPointError"):
        sel = scl.select_policy(bm, X, {"pl1": pl1, "weak": weak}, folds, seed=1)
    assert sel.best == "pl1" and list(sel.results) == ["pl1"] and list(sel.failures) == ["weak"]
    assert sel.table.index[-1] == "weak" and pd.isna(sel.table.loc["weak", "elpd"])
    assert sel.table.loc["weak", "error"] == "FloatingPointError in fit: no luck"
    assert sel.table.loc["weak", "position"] == 1
    monkeypatch.setattr(module, "fit", real_fit)
    with pytest.warns(GridEntryWarning, match="flagged.*'weak': fit not converged"), \
            pytest.warns(NonIdentifiableWarning, match="do not bound"):
        sel = scl.select_policy(bm, X, {"pl1": pl1, "weak": weak}, folds, seed=1)
    assert not sel.table.loc["weak", "fit_converged"] and sel.table.loc["pl1", "flag"] == ""
    with pytest.raises(InvalidDataError, match="every policy failed"):
        scl.select_policy(bm, 2 * X, [pl1], folds)


def test_beta_heuristic_minimises_the_diagonal_criterion_of_direct_scores(bm4):
    """PL1 (always) + FL (w.p. 0.3), plugged in at theta = THETA4 with the realised draws:
    a_gl and Q_l from the analytic PL1 scores and the FL scores T(x) - E T (NumPy), J
    minimised by scipy over beta_FL in (0, 1)."""
    bm, X = bm4
    groups = [scl.pseudo_likelihood(bm, 1), scl.full_likelihood(bm)]
    model = scl.SCLModel(bm, scl.Policy(groups, select=[1.0, 0.3]), seed=4)
    data = model.prepare(X)[0]
    beta = scl.heuristic_beta(model, data, scl.SCLParams(THETA4))
    Z = model.selections(len(X))
    # direct scores: PL1 (analytic) and FL
    W = np.zeros((4, 4))
    W[np.triu_indices(4, 1)] = THETA4
    W = W + W.T
    p_on = 1 / (1 + np.exp(-(X @ W)))
    resid = X - p_on
    pairs = list(zip(*np.triu_indices(4, 1)))
    g = np.zeros((len(X), 4, 6))
    curv = np.zeros((len(X), 4, 6))                   # -d2 S_j / dtheta_kl^2
    for d, (k, l) in enumerate(pairs):
        for j, other in ((k, l), (l, k)):
            g[:, j, d] = resid[:, j] * X[:, other]
            curv[:, j, d] = p_on[:, j] * (1 - p_on[:, j]) * X[:, other] ** 2
    S = suff_stats(states(4))
    pr = np.exp(S @ THETA4 - np.logaddexp.reduce(S @ THETA4))
    g_fl = suff_stats(X) - pr @ S
    s_pl = np.einsum("ij,ijd->id", Z[:, :4], g)
    s_fl = Z[:, 4:5] * g_fl
    a_pl = np.einsum("ij,ijd->d", Z[:, :4], curv) / len(X)
    a_fl = Z[:, 4].sum() / len(X) * np.diag((S - pr @ S).T @ ((S - pr @ S) * pr[:, None]))

    def crit(b):
        sigma = ((1 - b) * s_pl + b * s_fl) ** 2
        return np.sum(np.log(sigma.mean(0))) - 2 * np.sum(np.log((1 - b) * a_pl + b * a_fl))

    ref = scipy.optimize.minimize_scalar(crit, bounds=(1e-6, 1 - 1e-6), method="bounded",
                                         options={"xatol": 1e-10})
    assert 0.02 < ref.x < 0.98                        # an interior optimum
    np.testing.assert_allclose(beta, [1 - ref.x, ref.x], atol=1e-5)


def test_beta_heuristic_sweep_in_chunks_equals_one_sweep(bm4):
    """The tangent sweeps batched by memory (here all D = 6 tangents in one vmap, the program
    of the test above) and one tangent at a time give the same parts."""
    from approxcv.composite import beta as scl_beta
    bm, X = bm4
    groups = [scl.pseudo_likelihood(bm, 1), scl.full_likelihood(bm)]
    model = scl.SCLModel(bm, scl.Policy(groups, select=[1.0, 0.3]), seed=4)
    data = model.prepare(X)[0]
    theta = np.asarray(THETA4, dtype=np.float64)
    assert scl_beta.sweep_chunk(model, theta, data.samples) == 6
    assert scl_beta.sweep_chunk(model, theta, data.samples, budget=1) == 1
    whole = scl_beta._group_parts(model, data, theta, "corrected")
    single = scl_beta._group_parts(model, data, theta, "corrected", chunk=1)
    for x, y in zip(whole, single):                   # a (G, D), s (n, G, D): beta's inputs
        np.testing.assert_allclose(x, y, rtol=1e-12, atol=1e-14)
