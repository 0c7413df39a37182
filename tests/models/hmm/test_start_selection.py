"""Start selection by EM on a subsample (models/hmm/start_selection.py): the same optimum
as every start on all the data, on the shipped call volumes."""
import numpy as np
import pytest

import approxcv as acv
from approxcv.models.hmm.start_selection import (DISTINCT_RTOL, SELECT_GAP_PER_STEP,
                                                 keep_endpoints, subsample)


def test_subsampled_start_selection_reaches_todays_optimum_on_the_calls():
    x = acv.datasets.load_calls(4000)
    fits = {}
    for sub in (None, 800):
        model = acv.models.PoissonHMM(3, start_subsample=sub)
        params = model.fit(x)
        fits[sub] = (model.fit_result_, params)
    record = fits[800][0]["start_selection"]
    assert record["used"] and 1 <= len(record["kept"]) < 4
    assert "start_selection" not in fits[None][0]
    full, selected = fits[None][0]["final_objective"], fits[800][0]["final_objective"]
    assert abs(selected - full) <= 1e-8 * abs(full)
    rates = [np.sort(np.asarray(p.rates)) for _, p in fits.values()]
    np.testing.assert_allclose(rates[0], rates[1], rtol=1e-5)


def test_the_structure_level_subsample_is_the_first_sequences_holding_the_steps():
    x = acv.datasets.load_calls(2000)
    seqs = acv.models.PoissonHMM(2).prepare([x[i:i + 250] for i in range(0, 2000, 250)])[0]
    sub = subsample(seqs, "structure", 400)
    assert sub.x.shape[0] == 2 and np.asarray(sub.mask).sum() == 500
    assert subsample(seqs, "structure", 600) is None                  # 2000 < 4 x 600


def test_selection_applies_only_to_long_data_and_several_starts():
    x = acv.datasets.load_calls(2000)
    model = acv.models.PoissonHMM(2, start_subsample=800)      # 2000 < 4 x 800
    model.fit(x)
    assert "start_selection" not in model.fit_result_
    model = acv.models.PoissonHMM(2, start_subsample=400, n_init=1)
    model.fit(x)
    assert "start_selection" not in model.fit_result_
    seqs = model.prepare(x)[0]
    assert subsample(seqs, "within", 400).x.shape[1] == 400
    with pytest.raises(Exception, match="start_subsample"):
        acv.models.PoissonHMM(2, start_subsample=0)


def test_keep_endpoints_keeps_distinct_close_optima_and_drops_copies_and_far_ones():
    steps = 1000
    gap, same = SELECT_GAP_PER_STEP * steps, DISTINCT_RTOL * steps
    values = np.array([10.0 + gap / 2, 10.0, 10.0 + same / 10, 10.0 + 2 * gap, np.nan])
    np.testing.assert_array_equal(keep_endpoints(values, steps), [1, 0])
    np.testing.assert_array_equal(keep_endpoints(np.full(3, np.nan), steps), [0, 1, 2])
