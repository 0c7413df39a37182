"""The shared argument checks take NumPy scalars and 0-d arrays as numbers (issue 55: a
penalty of ``np.float32(0.01)`` was refused as "not a positive finite number")."""
import warnings

import numpy as np
import pytest

import approxcv as acv
from approxcv._validate import check_in_range, check_positive_int, real_number
from approxcv.engine.options import Options
from approxcv.errors import ArgumentTypeError, ConvergenceWarning, InvalidArgumentError
from approxcv.inference.latent_gaussian.ep import _check_options
from approxcv.selection.tuning import tune_regularization

NUMBERS = [0.25, 1, np.float32(0.25), np.float64(0.25), np.int64(1), np.array(0.25),
           np.array(1, dtype=np.int32)]


@pytest.mark.parametrize("value", NUMBERS, ids=repr)
def test_real_number_takes_python_and_numpy_scalars_and_0d_arrays(value):
    assert real_number("x", value) == float(value)
    assert isinstance(check_in_range("x", value, 0.0, 1.0, "right"), float)


@pytest.mark.parametrize("value", [True, np.bool_(True), "0.5", None, 1j, np.ones(2), [0.5]],
                         ids=repr)
def test_real_number_refuses_non_numbers_naming_the_argument(value):
    with pytest.raises(ArgumentTypeError, match="`x`"):
        real_number("x", value)


@pytest.mark.parametrize("value,closed", [(np.nan, "both"), (0.0, "right"), (np.inf, "left"),
                                          (-1.0, "both"), (np.float32(2.0), "both")])
def test_check_in_range_names_the_interval(value, closed):
    with pytest.raises(InvalidArgumentError, match=r"`C` must be a number in"):
        check_in_range("C", value, 0.0, 1.0 if value == 2.0 else np.inf, closed)
    assert check_in_range("C", np.inf, 0.0, np.inf, "right") == np.inf


def test_check_positive_int_takes_a_0d_integer_array():
    assert check_positive_int("n", np.array(3)) == 3
    with pytest.raises(InvalidArgumentError, match="`n` must be an integer"):
        check_positive_int("n", np.array(3.0))


def test_options_take_numpy_scalars_and_store_python_numbers():
    opts = Options(tol=np.float32(0.05), hessian_diagonal=np.float32(1e-3),
                   batch_size=np.int64(4), cg_rtol=np.array(1e-6))
    assert type(opts.tol) is float and opts.tol == pytest.approx(0.05)
    assert type(opts.hessian_diagonal) is float and type(opts.batch_size) is int
    with pytest.raises(InvalidArgumentError, match="`tol`"):
        Options(tol=np.float32(np.nan))
    with pytest.raises(InvalidArgumentError, match="`hessian_diagonal`"):
        Options(hessian_diagonal=np.float32(-1.0))


def test_cross_validate_and_tuning_take_a_float32_penalty_and_tolerances():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(20, 2))
    y = X @ [1.0, -1.0] + rng.normal(size=20)
    model = acv.models.Ridge(np.float32(0.01))
    res = acv.cross_validate(model, (X, y), acv.folds.leave_one_out(20), "ns",
                             tol=np.float32(0.05), progress=False, warn=False)
    assert res.fold_loss.shape == (20,)
    with warnings.catch_warnings():          # three steps: not converged, not the point
        warnings.simplefilter("ignore", ConvergenceWarning)
        out = tune_regularization(model, (X, y), np.float32(0.5), algorithm="newton",
                                  max_iter=3, xtol=np.float32(0.0), warn=False)
    assert np.isfinite(out.best_acv)


def test_gp_and_ep_options_take_numpy_scalars():
    gp = acv.models.GP("probit", damping=np.array(0.5), nu=np.float32(4.0),
                       prior_sd=np.array(3.0))
    assert gp.damping == 0.5 and type(gp.prior_sd) is float
    assert _check_options(np.float32(0.5), 10, np.array(1e-9), np.float64(1.0)) == (
        0.5, pytest.approx(1e-9), 1.0)
    with pytest.raises(InvalidArgumentError, match="EP's `damping`"):
        _check_options(np.float32(1.5), 10, 1e-9, 1.0)
