"""Model-agnostic fitting helpers (approxcv/fitting.py)."""
import numpy as np

from approxcv.fitting import rows_in_threads
from approxcv.optim import MinimizeResult


def test_rows_solved_in_threads_equal_one_call():
    """The rows split into equal groups (the last padded), one thread each: the same
    per-row results, in order, as one call on all rows; shared arguments reach every
    group."""
    calls = []

    def solve(u0s, weights, shift):
        calls.append(len(u0s))
        value = np.sum(u0s ** 2, axis=1) * weights[:, 0] + shift
        return MinimizeResult(u0s + shift, value, np.abs(value), value > 0,
                              np.arange(len(u0s)) * 0 + len(u0s))
    u0s = np.arange(10.0).reshape(5, 2)
    weights = np.linspace(1.0, 2.0, 5)[:, None] * np.ones((5, 3))
    one = rows_in_threads(solve, (u0s, weights), 0.5, workers=1)
    assert calls == [5]
    many = rows_in_threads(solve, (u0s, weights), 0.5, workers=3)
    assert sorted(calls[1:]) == [2, 2, 2]                  # 5 rows: groups of 2, one padded
    for a, b in zip(one[:4], many[:4]):
        np.testing.assert_array_equal(a, b)
    assert many.u.shape == (5, 2)
