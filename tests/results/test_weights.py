"""compare(weights=...): stacking, pseudo-BMA+ and pseudo-BMA weights against
arviz_stats.compare on the same pointwise elpd, and the cases where they are refused."""
import numpy as np
import pytest

import approxcv as acv
from approxcv.errors import InvalidArgumentError
from approxcv.results.weights import (pseudo_bma_plus_weights, pseudo_bma_weights,
                                      stacking_weights)

from .test_results import _result

ARVIZ = {"stacking": "stacking", "pseudo-bma+": "BB-pseudo-BMA", "pseudo-bma": "pseudo-BMA"}


def _three(folds, n, seed=0):
    """Three models' losses on ``n`` units: close enough that every weight is nontrivial."""
    rng = np.random.default_rng(seed)
    a = rng.normal(1.0, 0.5, n)
    b = a + rng.normal(0.05, 0.3, n)
    c = a + rng.normal(0.1, 0.6, n)
    return {name: _result(folds, [v[np.asarray(folds[i])] for i in range(len(folds))])
            for name, v in (("a", a), ("b", b), ("c", c))}


@pytest.mark.parametrize("folds", [acv.folds.leave_one_out(40), acv.folds.kfold(40, 5)],
                         ids=["loo", "kfold"])
@pytest.mark.parametrize("method", list(ARVIZ))
def test_weights_agree_with_arviz_stats_compare(folds, method):
    arviz_stats = pytest.importorskip("arviz_stats")
    results = _three(folds, 40)
    ours = acv.compare(results, weights=method)
    theirs = arviz_stats.compare({k: r.to_arviz() for k, r in results.items()},
                                 method=ARVIZ[method])
    assert list(ours.columns[:6]) == ["rank", "elpd", "se", "elpd_diff", "dse", "weight"]
    assert list(ours.index) == list(theirs.index)
    np.testing.assert_allclose(ours["weight"].to_numpy(float),
                               theirs.loc[ours.index, "weight"].to_numpy(float),
                               rtol=0, atol=1e-6)
    np.testing.assert_allclose(ours["weight"].sum(), 1.0, rtol=1e-12)
    assert ours.attrs["weights"] == method
    if method == "pseudo-bma+":
        assert ours.attrs["weights_seed"] == 124 and ours.attrs["weights_draws"] == 1000
    if method == "stacking":     # not a degenerate case: two models share the weight
        assert (ours["weight"] > 0.05).sum() >= 2


def test_default_table_is_unchanged_and_names_are_checked():
    folds = acv.folds.leave_one_out(20)
    results = _three(folds, 20)
    plain = acv.compare(results)
    assert "weight" not in plain.columns and "weights" not in plain.attrs
    weighted = acv.compare(results, weights="Stacking")
    assert weighted.drop(columns="weight").equals(plain)
    assert acv.compare(results, weights="BB-pseudo-BMA").attrs["weights"] == "pseudo-bma+"
    assert acv.compare({"a": results["a"]}, weights="stacking")["weight"].tolist() == [1.0]
    with pytest.raises(InvalidArgumentError, match="`weights` must be 'stacking'"):
        acv.compare(results, weights="bma")
    with pytest.raises(InvalidArgumentError, match="`seed`"):
        acv.compare(results, weights="pseudo-bma+", seed=-1)


def test_the_bootstrap_seed_is_explicit():
    results = _three(acv.folds.leave_one_out(30), 30)
    w = lambda seed: acv.compare(results, weights="pseudo-bma+", seed=seed)["weight"]
    np.testing.assert_array_equal(w(7), w(7))
    assert not np.array_equal(w(7), w(124))
    assert acv.compare(results, weights="pseudo-bma+", seed=7).attrs["weights_seed"] == 7


def test_weights_are_refused_where_pointwise_elpd_is_not_defined():
    folds = acv.folds.iid(30, 0.2, 12, seed=0)          # units recur across folds
    rng = np.random.default_rng(1)
    la = [rng.normal(1, 0.3, len(folds[i])) for i in range(len(folds))]
    ra, rb = _result(folds, la), _result(folds, [p + 0.5 for p in la])
    with pytest.raises(InvalidArgumentError, match="overlapping folds do not define.*"
                                                   "weights=None"):
        acv.compare({"a": ra, "b": rb}, weights="stacking")
    loo = _three(acv.folds.leave_one_out(20), 20)
    with pytest.raises(InvalidArgumentError, match="unit='fold' does not use.*unit='point'"):
        acv.compare(loo, unit="fold", weights="pseudo-bma")


@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")   # se of an inf
def test_non_finite_elpd_is_refused_and_on_reliable_weighs_the_kept_units():
    folds = acv.folds.leave_one_out(30)
    results = _three(folds, 30)
    loss = np.concatenate(results["b"].point_loss)
    loss[4] = np.inf
    results["b"] = _result(folds, loss[:, None])
    with pytest.raises(InvalidArgumentError, match="'b' has 1 non-finite.*on='reliable'"):
        acv.compare(results, weights="stacking")
    table = acv.compare(results, weights="stacking", on="reliable")
    kept = np.column_stack([np.delete(-np.concatenate(results[k].point_loss), 4)
                            for k in table.index])
    np.testing.assert_allclose(table["weight"], stacking_weights(kept), atol=1e-12)


def test_weight_functions_on_arrays():
    rng = np.random.default_rng(2)
    e = rng.normal(-1.0, 0.4, (50, 3))
    e[:, 1] += rng.normal(0, 0.5, 50)
    # stacking shifts each unit's row before exp: values arviz's exp would underflow at
    np.testing.assert_allclose(stacking_weights(e - 1000.0), stacking_weights(e), atol=1e-8)
    total = e.sum(axis=0)
    np.testing.assert_allclose(pseudo_bma_weights(e),
                               np.exp(total) / np.exp(total).sum(), rtol=1e-12)
    w = pseudo_bma_plus_weights(e, seed=3, draws=200)
    assert w.shape == (3,) and np.isclose(w.sum(), 1.0) and (w > 0).all()
    with pytest.raises(InvalidArgumentError, match="NaN or infinite"):
        stacking_weights(np.array([[0.0, np.nan]]))
