"""acv.plot: the comparison plot (ArviZ's layout) and CVResult.plot, drawn on Agg-backed
``Figure`` objects (no pyplot state, nothing shown)."""
import numpy as np
import pytest
from matplotlib.axes import Axes
from matplotlib.container import ErrorbarContainer
from matplotlib.figure import Figure

import approxcv as acv
from approxcv.errors import ArgumentTypeError, IncomparableResultsError, InvalidArgumentError

from .results.test_results import _result


def _ax():
    return Figure().subplots()


def _errorbars(ax):
    return [c for c in ax.containers if isinstance(c, ErrorbarContainer)]


@pytest.fixture
def three():
    rng = np.random.default_rng(0)
    n = 30
    folds = acv.folds.leave_one_out(n)
    a = rng.normal(1.0, 0.5, n)
    return folds, {"a": _result(folds, a[:, None]),
                   "b": _result(folds, (a + rng.normal(0.2, 0.2, n))[:, None]),
                   "c": _result(folds, (a + rng.normal(0.5, 0.3, n))[:, None],
                                unreliable=[3])}


def test_compare_draws_elpd_and_differences_best_on_top(three):
    _, results = three
    table = acv.compare(results)
    ax = acv.plot.compare(table, ax=_ax())
    assert isinstance(ax, Axes)
    bars = _errorbars(ax)
    assert len(bars) == 3 + 2            # elpd ± se per model, elpd_diff ± dse per non-best
    points = [(b.lines[0].get_xdata()[0], b.lines[0].get_ydata()[0]) for b in bars]
    best = table["elpd"].iloc[0]
    # circles at each elpd, top to bottom in rank order; triangles at best - elpd_diff
    circles = [points[0], points[1], points[3]]
    triangles = [points[2], points[4]]
    np.testing.assert_allclose([x for x, _ in circles], table["elpd"], rtol=1e-12)
    assert [y for _, y in circles] == [0.0, -1.0, -2.0]
    np.testing.assert_allclose([x for x, _ in triangles],
                               best - table["elpd_diff"].iloc[1:], rtol=1e-12)
    assert [t.get_text() for t in ax.get_yticklabels()] == list(table.index)
    assert any(np.allclose(line.get_xdata(), best) for line in ax.lines)   # the best's line
    assert ax.get_xlabel() == "elpd (sum over left-out units)"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "elpd ± se", "elpd_diff ± dse (to the best)"]
    # the row resting on an unreliable fold is red
    assert bars[3].lines[0].get_color() == "tab:red" and table.loc["c", "warning"]


def test_compare_leaves_out_rows_without_elpd_and_refuses_other_tables(three):
    _, results = three
    table = acv.compare(results)
    table.loc["c", ["elpd", "se", "elpd_diff", "dse"]] = np.nan    # a failed grid entry
    ax = acv.plot.compare(table, ax=_ax())
    assert len(_errorbars(ax)) == 3
    assert [t.get_text() for t in ax.get_yticklabels()] == ["a", "b"]
    with pytest.raises(ArgumentTypeError, match="missing"):
        acv.plot.compare(table[["elpd"]], ax=_ax())


def test_result_plot_along_the_folds_marks_unreliable_folds(three):
    folds, results = three
    r = results["c"]
    ax = r.plot(ax=_ax())
    assert isinstance(ax, Axes)
    np.testing.assert_allclose(ax.lines[0].get_ydata(), r.fold_loss)
    assert len(ax.lines[0].get_xdata()) == len(folds)
    (bad,) = ax.collections
    np.testing.assert_allclose(bad.get_offsets(), [[3.0, r.fold_loss[3]]])
    assert ax.get_xlabel() == "fold (position in res.folds)"
    ax = results["a"].plot(ax=_ax(), kind="point")
    assert not ax.collections                       # nothing unreliable, nothing marked
    np.testing.assert_allclose(ax.lines[0].get_xdata(), np.arange(len(folds)))


def test_result_plot_against_exact_is_a_scatter_with_the_identity_line(three):
    folds, results = three
    approx = results["c"]
    rng = np.random.default_rng(5)
    exact = _result(folds, (np.concatenate(approx.point_loss)
                            + rng.normal(0, 0.01, len(folds)))[:, None], method="exact")
    ax = approx.plot(ax=_ax(), exact=exact)
    good, bad = ax.collections
    assert len(good.get_offsets()) == len(folds) - 1 and len(bad.get_offsets()) == 1
    np.testing.assert_allclose(bad.get_offsets(), [[exact.fold_loss[3], approx.fold_loss[3]]])
    (identity,) = ax.lines
    np.testing.assert_allclose(identity.get_xdata(), identity.get_ydata())
    assert ax.get_xlabel() == "exact CV fold loss" and ax.get_ylabel() == "IJ fold loss"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        f"reliable folds ({len(folds) - 1})", "unreliable folds (1)", "y = x"]
    # exact CV on a subset of the folds: only the shared folds are drawn
    few = _result(folds.subset(np.arange(10)), np.concatenate(exact.point_loss)[:10, None],
                  method="exact")
    ax = approx.plot(ax=_ax(), exact=few, kind="point")
    assert sum(len(c.get_offsets()) for c in ax.collections) == 10


def test_result_plot_refuses_a_reference_of_other_inputs(three):
    folds, results = three
    r = results["a"]
    with pytest.raises(ArgumentTypeError, match="`exact` must be a CVResult"):
        r.plot(ax=_ax(), exact=np.zeros(3))
    other = _result(acv.folds.leave_one_out(31), np.ones((31, 1)), method="exact")
    with pytest.raises(IncomparableResultsError, match="field 'units'"):
        r.plot(ax=_ax(), exact=other)
    shuffled = acv.folds.Folds([np.array([i]) for i in np.roll(np.arange(30), 1)], 30)
    with pytest.raises(InvalidArgumentError, match="leaves out different units"):
        r.plot(ax=_ax(), exact=_result(shuffled, np.ones((30, 1)), method="exact"))
    with pytest.raises(InvalidArgumentError, match="`kind`"):
        r.plot(ax=_ax(), kind="unit")


def test_without_an_axes_a_new_figure_is_made_and_nothing_is_shown(three):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    _, results = three
    for ax in (acv.plot.compare(acv.compare(results)), results["a"].plot()):
        assert isinstance(ax, Axes)
        plt.close(ax.figure)
