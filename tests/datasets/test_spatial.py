"""The shipped spatial data sets: NC SIDS and Columbus crime with their contiguity graphs."""
import numpy as np

import approxcv as acv


def test_sids_counts_and_graph():
    d = acv.datasets.load_sids()
    assert d.sids74.shape == (100,) and d.names[0] == "Ashe"
    # totals from the source's 1974-78 and 1979-84 columns (Cressie 1993)
    assert (d.sids74.sum(), d.births74.sum(), d.sids79.sum()) == (667, 329962, 836)
    assert np.array_equal(d.adjacency, d.adjacency.T) and not np.diag(d.adjacency).any()
    assert d.adjacency.sum() // 2 == len(d.edges) == 231 and d.adjacency.sum(1).min() >= 1
    assert np.all(d.sids74 <= d.births74)


def test_columbus_and_available():
    c = acv.datasets.load_columbus()
    assert c.crime.shape == (49,) and c.adjacency.sum() // 2 == 118
    np.testing.assert_allclose(c.crime[0], 15.72598)
    assert {"sids", "columbus"} <= set(acv.datasets.available())
