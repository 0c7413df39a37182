import json
import warnings

import numpy as np
import pytest

import approxcv as acv
from approxcv.errors import (ArgumentTypeError, FoldIndexError, InexactFitWarning,
                             InvalidArgumentError, LocalOptimumWarning)


def test_cross_validate_result_shapes_and_frames(poisson_small):
    model, x, params = poisson_small
    folds = acv.folds.contiguous(len(x), 0.05, 4, seed=0)
    res = acv.cross_validate(model, x, folds, params=params, progress=False)
    assert res.fold_loss.shape == (4,) and len(res.point_loss) == 4
    assert res.params.rates.shape == (4, 2) and res.params_flat.shape[0] == 4
    for key in ("grad_norm", "hessian_min_eig", "jitter", "condition_number"):
        assert key in res.diagnostics
    df = res.to_frame()
    assert len(df) == 4 * 6 and set(df.columns) >= {"fold_id", "unit", "loss"}
    assert res.summary()["n_folds"] == 4 and res.seconds > 0
    w0 = folds.weights()[0]
    np.testing.assert_allclose(np.asarray(model.heldout_loss(params, x, w0)[1])[w0 == 0],
                               acv.cross_validate(model, x, folds[:1], params=params,
                                                  method="ij", progress=False).point_loss[0],
                               rtol=0.2)


def test_cross_validate_fits_when_params_missing(poisson_small):
    model, x, _ = poisson_small
    res = acv.cross_validate(model, x, [[3, 4]], progress=False)
    assert res.fit_seconds is not None and np.isfinite(res.fold_loss).all()


@pytest.mark.parametrize("kwargs,err,match", [
    (dict(method="loo"), InvalidArgumentError, "method"),
    (dict(scheme="C"), InvalidArgumentError, "scheme"),
    (dict(level="sites"), InvalidArgumentError, "level"),
    (dict(batch_size=-3), InvalidArgumentError, "`batch_size` must be >= 1, got -3"),
    (dict(exact_batch_size=0, method="exact"), InvalidArgumentError, "`exact_batch_size`"),
    (dict(cg_rtol=-1), InvalidArgumentError, "`cg_rtol` must be a finite number > 0"),
    (dict(cg_rtol=2.0), InvalidArgumentError, "`cg_rtol` must be < 1"),
    (dict(max_dense_dim=-1), InvalidArgumentError, "`max_dense_dim` must be >= 0"),
    (dict(cg_max_steps=0), InvalidArgumentError, "`cg_max_steps` must be >= 1"),
    (dict(structure_batch_size=0), InvalidArgumentError, "`structure_batch_size`"),
    (dict(batch_size=2.5), InvalidArgumentError, "`batch_size` must be an integer"),
    (dict(solver="lu"), InvalidArgumentError, "`solver`"),
])
def test_cross_validate_rejects_bad_arguments(poisson_small, kwargs, err, match):
    model, x, params = poisson_small
    with pytest.raises(err, match=match):
        acv.cross_validate(model, x, [[1]], params=params, progress=False, **kwargs)


def test_cross_validate_rejects_bad_folds_params_and_model(poisson_small):
    model, x, params = poisson_small
    with pytest.raises(FoldIndexError):
        acv.cross_validate(model, x, [[len(x)]], params=params)
    with pytest.raises(InvalidArgumentError, match="n=50"):
        acv.cross_validate(model, x, acv.folds.iid(50, 0.1, 2), params=params)
    bad = params._replace(rates=np.array([np.nan, 1.0]))
    with pytest.raises(InvalidArgumentError, match="params.rates"):
        acv.cross_validate(model, x, [[1]], params=bad)
    zero = params._replace(initial_probs=np.array([1.0, 0.0]))
    with pytest.raises(InvalidArgumentError, match="initial_probs"):
        acv.cross_validate(model, x, [[1]], params=zero)
    with pytest.raises(ArgumentTypeError, match="model"):
        acv.cross_validate(object(), x, [[1]])


def test_inexact_fit_is_reported_and_ij_still_tracks_exact(poisson_small):
    """An approximate fit is flagged, and IJ taken there stays close to exact CV."""
    model, x, params = poisson_small
    rough = params._replace(rates=params.rates * 1.01)
    folds = acv.folds.iid(len(x), 0.05, 4, seed=2)
    with pytest.warns(InexactFitWarning, match="gradient norm"):
        ij = acv.cross_validate(model, x, folds, params=rough, progress=False)
    assert ij.diagnostics["inexact_fit"] and ij.diagnostics["grad_norm"] > 1e-2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", InexactFitWarning)
        exact = acv.cross_validate(model, x, folds, params=rough, method="exact",
                                   progress=False)
    assert acv.accuracy(ij, exact).attrs["mean_rel_error_point"] < 0.05


def test_exact_cv_flags_refits_that_reach_a_better_optimum(poisson_local_optimum):
    """At a stationary local optimum that is not the best, an exact refit that reaches a
    lower full-data objective is flagged, and refitting from it finds the better optimum."""
    model, x, params = poisson_local_optimum
    folds = acv.folds.iid(len(x), 0.3, 6, seed=0).subset([0, 5])  # fold 5 changes optimum
    with pytest.warns(LocalOptimumWarning, match="not the best"):
        ex = acv.cross_validate(model, x, folds, method="exact", params=params,
                                progress=False)
    d = ex.diagnostics
    assert not d["inexact_fit"]
    lower = d["exact_full_objective"] < d["full_objective"]
    np.testing.assert_array_equal(d["better_optimum_folds"], folds.ids[lower])
    assert lower.tolist() == [False, True] and d["better_optimum_gap"] > 0.1  # measured 1.07
    fid = int(d["better_optimum_folds"][0])
    refit = acv.models.PoissonHMM(4, n_init=1, seed=2)
    better = refit.fit(x, init_params=ex.fold_params(fid))
    assert refit.fit_result_["final_objective"] < d["full_objective"] - 0.3  # measured 3.0
    with warnings.catch_warnings():
        warnings.simplefilter("error", LocalOptimumWarning)
        again = acv.cross_validate(refit, x, folds, method="exact", params=better,
                                   progress=False)
    assert "better_optimum_folds" not in again.diagnostics
    assert np.all(again.diagnostics["exact_full_objective"] >= again.diagnostics[
        "full_objective"])
    with pytest.raises(InvalidArgumentError, match="no fold"):
        ex.fold_params(99)


def test_compare_matches_fold_ids_and_checks_units(poisson_small):
    model, x, params = poisson_small
    folds = acv.folds.iid(len(x), 0.05, 6, seed=4)
    ij = acv.cross_validate(model, x, folds, params=params, progress=False)
    ex = acv.cross_validate(model, x, folds.subset([1, 4]), method="exact", params=params,
                            progress=False)
    df = acv.accuracy(ij, ex)
    assert set(df.fold_id) == {1, 4} and (df.kind == "fold").sum() == 2
    assert np.all(df.rel_error >= 0)
    other = acv.cross_validate(model, x, acv.folds.iid(len(x), 0.05, 6, seed=5), params=params,
                               progress=False)
    with pytest.raises(InvalidArgumentError, match="different units"):
        acv.accuracy(other, ex)
    with pytest.raises(ArgumentTypeError):
        acv.accuracy(ij, "exact")


def test_plots_write_files(poisson_small, tmp_path):
    model, x, params = poisson_small
    folds = acv.folds.iid(len(x), 0.05, 3, seed=4)
    ij = acv.cross_validate(model, x, folds, params=params, progress=False)
    ns = acv.cross_validate(model, x, folds, params=params, method="ns", progress=False)
    acv.report.plot.scatter(ij, ns, path=tmp_path / "s.png")
    acv.report.plot.timing_bars({"ij": ij.seconds, "ns": ns.seconds}, path=tmp_path / "t.png")
    assert (tmp_path / "s.png").stat().st_size > 1000 and (tmp_path / "t.png").exists()


def test_demo_command_writes_summary(tmp_path):
    from approxcv.cli import main
    out = tmp_path / "demo"
    rc = main(["demo", "--n-points", "300", "--n-folds", "40", "--n-exact", "2",
               "--out", str(out), "--quiet", "--report"])
    assert rc == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["T"] == 300 and summary["n_folds"] == 40
    assert 0 <= summary["mean_rel_error_point"] < 0.05
    assert (out / "scatter_points.png").exists() and (out / "comparison.csv").exists()
    saved = acv.load_results(out)            # the results, saved beside the summary
    assert set(saved) == {"ij", "exact"} and len(saved["ij"]) == 40
    np.testing.assert_allclose(acv.accuracy(saved["ij"], saved["exact"]).attrs[
        "mean_rel_error_point"], summary["mean_rel_error_point"], rtol=1e-12)
    html = (out / "report.html").read_text(encoding="utf-8")
    assert 'id="exact"' in html and html.count("data:image/png;base64,") >= 5


def test_demo_command_reports_bad_input(tmp_path, capsys):
    from approxcv.cli import main
    bad = tmp_path / "bad.csv"
    bad.write_text("calls\n1\n-3\n4\n")
    assert main(["demo", "--data", str(bad), "--out", str(tmp_path), "--quiet"]) == 2
    assert "non-negative" in capsys.readouterr().err
