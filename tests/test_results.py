"""compare_models: its standard errors against a hand computation and against
arviz_stats.compare, its choice of unit, and its errors."""
import numpy as np
import pytest

import approxcv as acv
from approxcv.errors import ArgumentTypeError, InvalidArgumentError


def _result(folds, point_loss, method="ij", unreliable=()):
    """A CVResult holding given per-unit losses (fold loss = their sum)."""
    point_loss = [np.asarray(p, float) for p in point_loss]
    return acv.CVResult(
        method=method, scheme="A", level="within", folds=folds,
        fold_loss=np.array([p.sum() for p in point_loss]), point_loss=point_loss,
        params=np.zeros((len(folds), 1)), params_flat=np.zeros((len(folds), 1)),
        seconds=0.0, diagnostics={"unreliable_folds": list(unreliable)})


@pytest.fixture
def loo_pair():
    rng = np.random.default_rng(0)
    n = 40
    folds = acv.folds.leave_one_out(n)
    a = rng.normal(1.0, 0.5, n)
    b = a + rng.normal(0.2, 0.1, n)          # worse on almost every unit, correlated with a
    return folds, a, b


def test_point_unit_standard_errors_equal_a_hand_computation(loo_pair):
    folds, a, b = loo_pair
    table = acv.compare_models({"b": _result(folds, b[:, None]),
                                "a": _result(folds, a[:, None])})
    assert table.attrs["unit"] == "point" and list(table.index) == ["a", "b"]
    n = a.size
    np.testing.assert_allclose(table.loc["a", "elpd"], -a.sum(), rtol=1e-12)
    np.testing.assert_allclose(table.loc["b", "se"], np.sqrt(n) * np.std(-b, ddof=1),
                               rtol=1e-12)
    np.testing.assert_allclose(table.loc["b", "elpd_diff"], b.sum() - a.sum(), rtol=1e-12)
    np.testing.assert_allclose(table.loc["b", "dse"], np.sqrt(n) * np.std(b - a, ddof=1),
                               rtol=1e-12)
    assert table.loc["a", "dse"] == 0.0 and table.loc["b", "rank"] == 1
    # pairing matters: the difference's standard error is far below either model's own
    assert table.loc["b", "dse"] < 0.5 * table.loc["b", "se"]
    assert not table["warning"].any()


def test_point_unit_agrees_with_arviz_stats_compare(loo_pair):
    arviz_stats = pytest.importorskip("arviz_stats")
    folds, a, b = loo_pair
    ra, rb = _result(folds, a[:, None]), _result(folds, b[:, None])
    ours = acv.compare_models({"a": ra, "b": rb})
    theirs = arviz_stats.compare({"a": ra.to_arviz(), "b": rb.to_arviz()})
    for col in ("elpd", "se", "elpd_diff"):
        np.testing.assert_allclose(ours.loc[["a", "b"], col].to_numpy(float),
                                   theirs.loc[["a", "b"], col].to_numpy(float), rtol=1e-9)
    # arviz-stats takes the variance of the differences with ddof=0, we (like R's loo) ddof=1
    n = a.size
    np.testing.assert_allclose(ours.loc["b", "dse"],
                               theirs.loc["b", "dse"] * np.sqrt(n / (n - 1)), rtol=1e-9)


def test_overlapping_folds_compare_fold_means_and_flag_unreliable_folds():
    folds = acv.folds.iid(30, 0.2, 12, seed=0)   # units recur across folds
    rng = np.random.default_rng(1)
    la = [rng.normal(1, 0.3, len(folds[i])) for i in range(len(folds))]
    lb = [p + 0.5 for p in la]
    ra, rb = _result(folds, la), _result(folds, lb, unreliable=[int(folds.ids[3])])
    table = acv.compare_models({"a": ra, "b": rb})
    assert table.attrs["unit"] == "fold"
    fa, fb = -ra.fold_loss, -rb.fold_loss
    np.testing.assert_allclose(table.loc["a", "elpd"], fa.mean(), rtol=1e-12)
    np.testing.assert_allclose(table.loc["a", "se"], np.std(fa, ddof=1) / np.sqrt(12),
                               rtol=1e-12)
    np.testing.assert_allclose(table.loc["b", "dse"], np.std(fa - fb, ddof=1) / np.sqrt(12),
                               rtol=1e-12, atol=1e-12)
    assert table.loc["b", "warning"] and table.loc["b", "n_unreliable"] == 1
    reliable = acv.compare_models({"a": ra, "b": rb}, on="reliable")
    assert reliable.attrs["n_folds"] == 11 and not reliable["warning"].any()
    np.testing.assert_allclose(reliable.loc["a", "elpd"], np.delete(fa, 3).mean(), rtol=1e-12)


def test_results_on_different_folds_or_units_are_refused(loo_pair):
    folds, a, b = loo_pair
    ra = _result(folds, a[:, None])
    other = _result(acv.folds.leave_one_out(a.size - 1), b[:-1, None])
    with pytest.raises(InvalidArgumentError, match="different folds"):
        acv.compare_models({"a": ra, "b": other})
    shuffled = acv.folds.Folds([np.array([i]) for i in np.roll(np.arange(a.size), 1)], a.size)
    with pytest.raises(InvalidArgumentError, match="different units"):
        acv.compare_models({"a": ra, "b": _result(shuffled, b[:, None])})
    with pytest.raises(ArgumentTypeError, match="results"):
        acv.compare_models([ra])
    with pytest.raises(InvalidArgumentError, match="`on`"):
        acv.compare_models({"a": ra}, on="some")


def test_plot_compare_draws_one_row_per_model(loo_pair, tmp_path):
    folds, a, b = loo_pair
    table = acv.compare_models({"a": _result(folds, a[:, None]),
                                "b": _result(folds, b[:, None], unreliable=[0])})
    ax = acv.plot.compare(table, path=tmp_path / "compare.png")
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b"]
    assert (tmp_path / "compare.png").stat().st_size > 0
