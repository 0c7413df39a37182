"""Results of any model convert to ArviZ: an HMM's and a GP's LOO ranked by
arviz_stats.compare (the GP results' own conversion is tested in test_loo.py, beside the
fits it reuses)."""
import arviz_stats
import numpy as np

import approxcv as acv


def test_to_arviz_ranks_an_hmm_and_a_gp_on_the_same_counts(poisson_small):
    """A Poisson HMM (IJ leave-one-out; the suite's shared fitted 2-state HMM) and a
    Poisson GP over time (LA-LOO) of the same 120 counts, both through cross_validate,
    compared by arviz_stats.compare."""
    model, x, params = poisson_small
    T = len(x)
    folds = acv.folds.leave_one_out(T)
    hmm = acv.cross_validate(model, x, folds, "ij", params=params, progress=False,
                             warn=False)
    t = (np.arange(T) - T / 2)[:, None] / 10.0
    gp_params = acv.models.GPParams(np.log([[1.0, 0.1, 1.0, 0.3]]), np.zeros(1))
    gp = acv.cross_validate(acv.models.GP("poisson"), (t, x), folds, "la", params=gp_params, warn=False,
                            progress=False)
    table = arviz_stats.compare({"hmm": hmm.to_arviz(), "gp": gp.to_arviz()})
    elpd = {"hmm": -np.sum(np.concatenate(hmm.point_loss)), "gp": gp.elpd}
    assert table.index[0] == max(elpd, key=elpd.get)
    np.testing.assert_allclose(table.loc[list(elpd), "elpd"], list(elpd.values()))
