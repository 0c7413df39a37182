"""The sklearn search's start for its Newton stage (pure NumPy: nothing compiles)."""
import numpy as np
import pytest

from approxcv.sklearn._penalty_search import parabola_vertex


@pytest.mark.parametrize("spacing", [(1.0, 1.0), (0.5, 2.0)])
def test_vertex_of_a_parabola_in_log_lam_is_its_minimum(spacing):
    rho = np.array([0.0, spacing[0], spacing[0] + spacing[1]])
    grid = np.exp(rho)
    acv = 3.0 + 0.25 * (rho - 1.3) ** 2
    assert np.log(parabola_vertex(grid, acv, 1)) == pytest.approx(1.3, abs=1e-12)


def test_vertex_falls_back_to_the_grid_point():
    grid = np.array([0.1, 1.0, 10.0, 100.0])
    acv = np.array([2.0, 1.0, 1.5, 3.0])
    assert parabola_vertex(grid, acv, 0) == 0.1                   # an end of the grid
    assert parabola_vertex(grid, acv, 3) == 100.0
    assert parabola_vertex(grid, np.array([np.nan, 1.0, 1.5, 3.0]), 1) == 1.0
    assert parabola_vertex(grid, np.array([1.0, 1.0, 1.0, 3.0]), 1) == 1.0   # flat
    inside = parabola_vertex(grid, acv, 1)
    assert 0.1 < inside < 10.0 and inside != 1.0
