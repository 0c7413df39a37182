"""Bad inputs give clear errors that name the problem."""
import numpy as np
import pytest

import approxcv.composite as scl
from approxcv.errors import InvalidArgumentError, InvalidDataError


@pytest.fixture(scope="module")
def bm():
    return scl.BoltzmannMachine(4)


def test_data_must_be_binary_with_one_column_per_node(bm):
    pol = scl.Policy(scl.pseudo_likelihood(bm, 1))
    with pytest.raises(InvalidDataError, match="`X` must be binary"):
        scl.fit(bm, np.full((5, 4), 0.5), pol)
    with pytest.raises(InvalidDataError, match=r"`X` must be an \(n, 4\) array"):
        scl.fit(bm, np.zeros((5, 3)), pol)


def test_selection_probabilities_must_lie_in_0_1(bm):
    pl1 = scl.pseudo_likelihood(bm, 1)
    with pytest.raises(InvalidArgumentError, match="never selected"):
        scl.Policy([pl1, scl.pseudo_likelihood(bm, 2)], select=[1.0, 0.0])
    with pytest.raises(InvalidArgumentError, match=r"must lie in \(0, 1\]"):
        scl.Policy(pl1, select=1.5)
    with pytest.raises(InvalidArgumentError, match="sum to 1"):
        scl.Policy([pl1, scl.full_likelihood(bm)], select=[0.5, 0.6], kind="multinomial")
    with pytest.raises(InvalidArgumentError, match="`weight`"):
        scl.Policy(pl1, weight=-1.0)


def test_components_must_identify_every_parameter(bm):
    pol = scl.Policy([((0,), (1, 2, 3))])     # only node 0's conditional: misses 12, 13, 23
    with pytest.raises(InvalidArgumentError, match=r"do not identify.*theta_12"):
        scl.SCLModel(bm, pol)
    with pytest.raises(InvalidArgumentError, match="share nodes"):
        scl.SCLModel(bm, scl.Policy([((0, 1), (1, 2))]))
    with pytest.raises(InvalidArgumentError, match="A is empty"):
        scl.SCLModel(bm, scl.Policy([((), (1, 2))]))


def test_too_many_nodes_for_enumeration():
    with pytest.raises(InvalidArgumentError, match=r"`n_nodes` = 21 is too large"):
        scl.BoltzmannMachine(21)
