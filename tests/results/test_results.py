"""compare: its standard errors against a hand computation and against
arviz_stats.compare, its choice of unit, and its errors."""
import numpy as np
import pytest

import approxcv as acv
from approxcv.errors import ArgumentTypeError, IncomparableResultsError, InvalidArgumentError


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
    table = acv.compare({"b": _result(folds, b[:, None]),
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
    ours = acv.compare({"a": ra, "b": rb})
    theirs = arviz_stats.compare({"a": ra.to_arviz(), "b": rb.to_arviz()})
    for col in ("elpd", "se", "elpd_diff"):
        np.testing.assert_allclose(ours.loc[["a", "b"], col].to_numpy(float),
                                   theirs.loc[["a", "b"], col].to_numpy(float), rtol=1e-9)
    # arviz-stats takes the variance of the differences with ddof=0, we (like R's loo) ddof=1
    n = a.size
    np.testing.assert_allclose(ours.loc["b", "dse"],
                               theirs.loc["b", "dse"] * np.sqrt(n / (n - 1)), rtol=1e-9)



def test_every_result_has_elpd_se_and_lpd_as_compare_ranks_it(loo_pair):
    """``res.elpd``, ``res.se`` and ``res.lpd`` (higher is better) are what
    :func:`acv.compare` ranks: sums over left-out units when no unit is left out twice,
    fold means when folds overlap."""
    folds, a, b = loo_pair
    ra, rb = _result(folds, a[:, None]), _result(folds, b[:, None])
    table = acv.compare({"a": ra, "b": rb})
    for name, r in (("a", ra), ("b", rb)):
        assert r.elpd_unit == "point"
        np.testing.assert_allclose(r.lpd, -np.concatenate(r.point_loss), rtol=0)
        np.testing.assert_allclose([r.elpd, r.se], table.loc[name, ["elpd", "se"]], rtol=1e-12)
    folds = acv.folds.Folds([np.array([0, 1]), np.array([1, 2]), np.array([2, 3])], 4)
    over = _result(folds, [np.array([0.5, 1.0]), np.array([0.2, 0.4]), np.array([1.5, 0.1])])
    assert over.elpd_unit == "fold"
    np.testing.assert_allclose(over.lpd, -over.fold_loss, rtol=0)
    np.testing.assert_allclose(over.elpd, -np.mean(over.fold_loss), rtol=1e-15)
    np.testing.assert_allclose(over.se, np.std(over.fold_loss, ddof=1) / np.sqrt(3),
                               rtol=1e-12)
def test_overlapping_folds_compare_fold_means_and_flag_unreliable_folds():
    folds = acv.folds.iid(30, 0.2, 12, seed=0)   # units recur across folds
    rng = np.random.default_rng(1)
    la = [rng.normal(1, 0.3, len(folds[i])) for i in range(len(folds))]
    lb = [p + 0.5 for p in la]
    ra, rb = _result(folds, la), _result(folds, lb, unreliable=[int(folds.ids[3])])
    table = acv.compare({"a": ra, "b": rb})
    assert table.attrs["unit"] == "fold"
    fa, fb = -ra.fold_loss, -rb.fold_loss
    np.testing.assert_allclose(table.loc["a", "elpd"], fa.mean(), rtol=1e-12)
    np.testing.assert_allclose(table.loc["a", "se"], np.std(fa, ddof=1) / np.sqrt(12),
                               rtol=1e-12)
    np.testing.assert_allclose(table.loc["b", "dse"], np.std(fa - fb, ddof=1) / np.sqrt(12),
                               rtol=1e-12, atol=1e-12)
    assert table.loc["b", "warning"] and table.loc["b", "n_unreliable"] == 1
    reliable = acv.compare({"a": ra, "b": rb}, on="reliable")
    assert reliable.attrs["n_folds"] == 11 and not reliable["warning"].any()
    np.testing.assert_allclose(reliable.loc["a", "elpd"], np.delete(fa, 3).mean(), rtol=1e-12)


def test_results_on_different_folds_or_units_are_refused(loo_pair):
    folds, a, b = loo_pair
    ra = _result(folds, a[:, None])
    other = _result(acv.folds.leave_one_out(a.size - 1), b[:-1, None])
    with pytest.raises(IncomparableResultsError, match="field 'units'"):
        acv.compare({"a": ra, "b": other})
    fewer = _result(folds.subset(np.arange(a.size - 1)), b[:-1, None])
    with pytest.raises(IncomparableResultsError, match="different folds.*field 'folds'"):
        acv.compare({"a": ra, "b": fewer})
    shuffled = acv.folds.Folds([np.array([i]) for i in np.roll(np.arange(a.size), 1)], a.size)
    with pytest.raises(InvalidArgumentError, match="different units"):
        acv.compare({"a": ra, "b": _result(shuffled, b[:, None])})
    with pytest.raises(ArgumentTypeError, match="results"):
        acv.compare([ra])
    with pytest.raises(InvalidArgumentError, match="`on`"):
        acv.compare({"a": ra}, on="some")


def test_plot_compare_draws_one_row_per_model(loo_pair, tmp_path):
    folds, a, b = loo_pair
    table = acv.compare({"a": _result(folds, a[:, None]),
                         "b": _result(folds, b[:, None], unreliable=[0])})
    ax = acv.report.plot.compare(table, path=tmp_path / "compare.png")
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b"]
    assert (tmp_path / "compare.png").stat().st_size > 0


@pytest.fixture(scope="module")
def ridge_runs():
    """Ridge (n = 20, 2 features) by exact LOO on data ``y`` and on data with another ``y``."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(20, 2))
    y = X @ np.array([1.0, -0.5]) + rng.normal(0, 0.3, 20)
    model = acv.models.Ridge(lam=1.0)
    folds = acv.folds.leave_one_out(20)
    run = lambda data, m=model: acv.cross_validate(m, data, folds, method="ij", warn=False,
                                                   progress=False)
    return {"base": run((X, y)), "other_y": run((X, y[::-1].copy())),
            "stronger": run((X, y), acv.models.Ridge(lam=5.0)),
            "one_feature": run((X[:, :1], y)), "X": X, "y": y, "folds": folds}


def test_a_result_carries_what_it_was_computed_on(ridge_runs):
    fp = ridge_runs["base"].fingerprint
    assert set(fp) == {"data", "level", "units", "folds"}
    assert fp["level"] == "within" and fp["units"] == 20 and len(fp["data"]) == 64
    # the same values spelled as a list (of an array and a list) digest alike
    from approxcv.engine.fingerprint import result_fingerprint
    X, y = ridge_runs["X"], ridge_runs["y"]
    assert result_fingerprint([X, list(y)], ridge_runs["folds"], "within") == fp
    assert ridge_runs["other_y"].fingerprint["data"] != fp["data"]
    assert ridge_runs["other_y"].fingerprint["folds"] == fp["folds"]


def test_results_on_other_data_are_neither_ranked_nor_compared(ridge_runs):
    base, other = ridge_runs["base"], ridge_runs["other_y"]
    with pytest.raises(IncomparableResultsError, match="field 'data'"):
        acv.compare({"a": base, "b": other})
    with pytest.raises(IncomparableResultsError, match="field 'data'"):
        acv.accuracy(base, other)          # an "exact" result from another run
    # the same data: ranked; other features predicting the same y: only when asked
    assert len(acv.compare({"a": base, "b": ridge_runs["stronger"]})) == 2
    with pytest.raises(IncomparableResultsError, match="check_data=False"):
        acv.compare({"a": base, "b": ridge_runs["one_feature"]})
    table = acv.compare({"a": base, "b": ridge_runs["one_feature"]}, check_data=False)
    assert table.attrs["n_folds"] == 20


def test_results_on_more_units_with_the_same_fold_indices_are_refused():
    folds40, folds50 = acv.folds.kfold(40, 5, seed=0), acv.folds.kfold(40, 5, seed=0)
    folds50 = acv.folds.Folds([folds50[i] for i in range(5)], 50, ids=folds50.ids)
    loss = [np.ones(len(folds40[i])) for i in range(5)]
    with pytest.raises(IncomparableResultsError, match="40 and 50.*field 'units'"):
        acv.compare({"a": _result(folds40, loss), "b": _result(folds50, loss)})


def test_results_at_different_levels_are_refused(loo_pair):
    import dataclasses
    folds, a, b = loo_pair
    within = _result(folds, a[:, None])
    structure = dataclasses.replace(_result(folds, b[:, None]), level="structure", scheme=None)
    with pytest.raises(IncomparableResultsError, match="levels.*field 'level'"):
        acv.compare({"sentences": structure, "labels": within})
    with pytest.raises(IncomparableResultsError, match="field 'level'"):
        acv.accuracy(within, structure)
    # a GP's leave-one-out points and one series' points are both single observations
    gp_points = dataclasses.replace(_result(folds, b[:, None]), level="point", scheme=None)
    assert len(acv.compare({"series": within, "gp": gp_points})) == 2


def test_an_unflagged_nan_fold_is_unreliable_and_warned(loo_pair):
    folds, a, b = loo_pair
    b = b.copy()
    b[5] = np.nan
    rb = _result(folds, b[:, None])          # no fold flagged by its method
    assert rb.unreliable[5] and rb.unreliable.sum() == 1
    table = acv.compare({"a": _result(folds, a[:, None]), "b": rb})
    assert table.loc["b", "warning"] and table.loc["b", "n_unreliable"] == 1
    reliable = acv.compare({"a": _result(folds, a[:, None]), "b": rb}, on="reliable")
    assert np.isfinite(reliable["elpd"]).all() and reliable.attrs["n_folds"] == a.size - 1
    assert rb.summary()["n_unreliable"] == 1


def test_point_units_on_overlapping_folds_are_refused():
    folds = acv.folds.iid(48, 0.1, 50, seed=0)      # 4 units each: 200 left out, 47 distinct
    loss = [np.ones(len(folds[i])) for i in range(len(folds))]
    ra, rb = _result(folds, loss), _result(folds, [p + 1 for p in loss])
    with pytest.raises(InvalidArgumentError, match="unit='point'.*47 distinct units 200 times"):
        acv.compare({"a": ra, "b": rb}, unit="point")
    assert acv.compare({"a": ra, "b": rb}).attrs["unit"] == "fold"


def test_to_arviz_fills_p_from_the_in_sample_density_and_flags_nan_folds(loo_pair):
    arviz_stats = pytest.importorskip("arviz_stats")
    folds, a, b = loo_pair
    ra, rb = _result(folds, a[:, None]), _result(folds, b[:, None])
    assert np.isnan(ra.to_arviz().p)                 # nothing to compute it from: NaN
    ra.diagnostics["lpd_full"] = -a + 0.05           # in-sample: a little better per unit
    rb.diagnostics["p_loo"] = 3.5
    table = arviz_stats.compare({"a": ra.to_arviz(), "b": rb.to_arviz()})
    np.testing.assert_allclose(table.loc["a", "p"], 0.05 * a.size, rtol=1e-9)
    assert table.loc["b", "p"] == 3.5 and np.isfinite(table["p"].to_numpy(float)).all()
    ra.diagnostics["lpd_full"] = np.zeros(3)
    with pytest.raises(InvalidArgumentError, match="lpd_full"):
        ra.to_arviz()
    nan = b.copy()
    nan[2] = np.nan
    assert _result(folds, nan[:, None]).to_arviz().warning   # unflagged NaN fold: a warning


def test_to_arviz_on_overlapping_folds_exports_folds_and_no_pareto_k():
    """Leave-future-out folds overlap: to_arviz() used to report elpd_loo over every unit
    counted once per fold, with a Pareto-k table of "good 100 %" where no importance
    sampling was done."""
    arviz_stats = pytest.importorskip("arviz_stats")
    folds = acv.folds.leave_future_out(30, [20, 24, 27])
    loss = [np.full(len(folds[i]), 0.5 + i) for i in range(len(folds))]
    res = _result(folds, loss)
    e = res.to_arviz()
    assert e.n_data_points == 3 and e.approxcv_unit == "fold"
    np.testing.assert_allclose(np.asarray(e.elpd_i), -res.fold_loss, rtol=0)
    np.testing.assert_array_equal(e.elpd_i["obs"], res.fold_ids)
    assert e.elpd == pytest.approx(-res.fold_loss.sum()) and e.pareto_k is None
    assert "good" not in str(e)
    with pytest.raises(InvalidArgumentError, match="overlap"):
        res.to_arviz(unit="point")
    with pytest.raises(InvalidArgumentError, match="unit"):
        res.to_arviz(unit="units")
    loo = _result(acv.folds.leave_one_out(5), np.ones((5, 1)))
    assert loo.to_arviz().pareto_k is None and loo.to_arviz().approxcv_unit == "point"
    assert loo.to_arviz(unit="fold").n_data_points == 5
    arviz_stats.compare({"a": res.to_arviz(), "b": _result(folds, [p + 1 for p in loss]).to_arviz()})


def _full_fit(problem, folds, options):
    """A method whose every fold keeps the full-data fit (its held-out losses are the
    in-sample ones)."""
    return np.tile(np.asarray(problem.u_full), (len(folds), 1)), {}


def test_in_sample_records_lpd_at_the_full_fit_and_fills_p(ridge_runs):
    acv.register_method("_full_fit_test", _full_fit)
    model, data = acv.models.Ridge(lam=1.0), (ridge_runs["X"], ridge_runs["y"])
    params = model.fit(data)
    folds = acv.folds.kfold(len(data[1]), 5)
    res = acv.cross_validate(model, data, folds, "ns", params=params, in_sample=True,
                             progress=False, warn=False)
    full = acv.cross_validate(model, data, folds, "_full_fit_test", params=params,
                              progress=False, warn=False)
    np.testing.assert_allclose(res.diagnostics["lpd_full"], full.lpd, rtol=1e-12)
    p = res.to_arviz().p
    np.testing.assert_allclose(p, full.lpd.sum() - res.elpd, rtol=1e-12)
    assert 0 < p < 2 + 1 + 1               # about the 2 coefficients and the intercept
    assert np.isnan(acv.cross_validate(model, data, folds, "ns", params=params,
                                       progress=False, warn=False).to_arviz().p)
    with pytest.raises(InvalidArgumentError, match="in_sample"):
        acv.cross_validate(model, data, folds, "ns", params=params, in_sample=1)


def test_results_of_folds_that_remove_more_than_they_score_map_points_to_scored_units(
        tmp_path):
    """h-block folds: every point loss, lpd entry, frame row, ArviZ observation and paired
    comparison is a scored unit (a partition of the data), and a save keeps the scored
    sets."""
    import jax.scipy.stats as jst
    y = np.random.default_rng(4).normal(0.5, 1.5, size=24)
    models = {"normal": acv.models.Pointwise(
                  lambda p, u: jst.norm.logpdf(u["y"], p["mu"], p["sigma"]),
                  init={"mu": 0.0, "sigma": 1.0}, constraints={"sigma": "positive"}),
              "student": acv.models.Pointwise(
                  lambda p, u: jst.t.logpdf(u["y"], 4.0, p["mu"], p["s"]),
                  init={"mu": 0.0, "s": 1.0}, constraints={"s": "positive"})}
    folds = acv.folds.hblock(24, 4, 3)
    res = {k: acv.cross_validate(m, {"y": y}, folds, "exact", progress=False, restarts=0)
           for k, m in models.items()}
    r = res["normal"]
    assert [len(p) for p in r.point_loss] == [6] * 4 and r.elpd_unit == "point"
    assert r.lpd.shape == (24,)
    np.testing.assert_array_equal(r.to_frame()["unit"], np.arange(24))
    np.testing.assert_array_equal(r.to_arviz().elpd_i.coords["obs"], np.arange(24))
    table = acv.compare(res, unit="point")
    assert table.attrs["unit"] == "point"
    np.testing.assert_allclose(table.loc["normal", "elpd"], -np.sum(r.fold_loss), rtol=1e-12)
    back = acv.load_result(r.save(tmp_path / "hblock"))
    assert back.folds.partial
    for i in range(4):
        np.testing.assert_array_equal(back.folds.scored[i], folds.scored[i])
        np.testing.assert_array_equal(back.folds[i], folds[i])
    assert back.fingerprint == r.fingerprint
    # the same removed sets scoring everything are other folds: not compared with these
    plain = acv.cross_validate(models["normal"], {"y": y},
                               acv.folds.Folds(list(folds), 24), "exact", progress=False,
                               restarts=0)
    with pytest.raises(acv.errors.IncomparableResultsError):
        acv.compare({"hblock": r, "plain": plain})
