"""Results: to_arviz() accepted by arviz_stats.compare for GP and HMM results; brute force
through the executor and checkpoint machinery."""
from concurrent.futures import ThreadPoolExecutor

import arviz_stats
import numpy as np
import pytest

import approxcv as acv
from approxcv import bayes
from approxcv.bayes import brute
from approxcv.errors import CheckpointError

N = 12


@pytest.fixture(scope="module")
def gp_fits():
    rng = np.random.default_rng(5)
    X = rng.normal(size=(N, 2))
    y = np.where(X[:, 0] + 0.7 * rng.normal(size=N) > 0, 1.0, -1.0)
    theta = np.log([0.5, 0.2, 1.5, 1.0, 1.3])[None]
    return {inf: bayes.GP("probit").fit(X, y, inference=inf, hyper=theta)
            for inf in ("laplace", "ep")}


def test_to_arviz_of_gp_results_is_compared_by_arviz_stats(gp_fits):
    la = bayes.loo(gp_fits["laplace"], "la")
    ep = bayes.loo(gp_fits["ep"], "ep")
    data = la.to_arviz()
    assert isinstance(data, arviz_stats.ELPDData)
    np.testing.assert_allclose(np.asarray(data.elpd_i), la.lpd)
    assert data.elpd == pytest.approx(la.elpd) and data.se == pytest.approx(la.se)
    table = arviz_stats.compare({"laplace": data, "ep": ep.to_arviz()})
    assert set(table.index) == {"laplace", "ep"}
    assert table.loc[table.index[0], "elpd"] == pytest.approx(max(la.elpd, ep.elpd))


def test_to_arviz_ranks_an_hmm_and_a_gp_on_the_same_counts(poisson_small):
    """A Poisson HMM (IJ leave-one-out through cross_validate; the suite's shared fitted
    2-state HMM) and a Poisson GP over time (LA-LOO) of the same 120 counts, compared by
    arviz_stats.compare."""
    model, x, params = poisson_small
    T = len(x)
    hmm = acv.cross_validate(model, x, acv.folds.leave_one_out(T), "ij", params=params,
                             progress=False)
    t = (np.arange(T) - T / 2)[:, None] / 10.0
    gp = bayes.loo(bayes.GP("poisson").fit(t, x, hyper=np.log([[1.0, 0.1, 1.0, 0.3]])), "la")
    table = arviz_stats.compare({"hmm": hmm.to_arviz(), "gp": gp.to_arviz()})
    elpd = {"hmm": -np.sum(np.concatenate(hmm.point_loss)), "gp": gp.elpd}
    assert table.index[0] == max(elpd, key=elpd.get)
    np.testing.assert_allclose(table.loc[list(elpd), "elpd"], list(elpd.values()))


def test_brute_force_resumes_from_checkpoint_and_runs_on_an_executor(gp_fits, tmp_path,
                                                                     monkeypatch):
    fitted = gp_fits["laplace"]
    path = tmp_path / "brute"
    first = bayes.loo(fitted, "brute", checkpoint=path, batch_size=5)
    with ThreadPoolExecutor(2) as pool:
        threaded = bayes.loo(fitted, "brute", executor=pool, batch_size=5)
    np.testing.assert_array_equal(threaded.lpd, first.lpd)

    def refuse(self, s, rows):
        raise AssertionError("a checkpointed fold was recomputed")
    monkeypatch.setattr(brute.BruteBatch, "__call__", refuse)
    again = bayes.loo(fitted, "brute", checkpoint=path, batch_size=5)
    np.testing.assert_array_equal(again.lpd, first.lpd)
    other = bayes.GP("probit").fit(fitted.X, fitted.y, hyper=fitted.points + 0.1)
    with pytest.raises(CheckpointError):
        bayes.loo(other, "brute", checkpoint=path)
