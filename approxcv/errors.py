"""Errors and warnings raised by approxcv.

Every error is a subclass of both :class:`ApproxCVError` and the built-in
``ValueError`` or ``TypeError`` it refines, so ``except ValueError`` keeps working.
Messages name the offending argument. Warnings point at the user's line:
:func:`user_stacklevel` is the ``stacklevel`` of the first caller outside approxcv.
"""
import inspect


def user_stacklevel() -> int:
    """``stacklevel`` for a ``warnings.warn`` made by the function calling this one, such that
    the warning points at the first frame outside the approxcv package (the user's call,
    however deep inside approxcv — ``select`` calling ``cross_validate`` calling a method —
    the warning was raised)."""
    frame, level = inspect.currentframe().f_back, 1
    while frame is not None and frame.f_globals.get("__name__", "").split(".")[0] == "approxcv":
        frame, level = frame.f_back, level + 1
    return level


class ApproxCVError(Exception):
    """Base class of every approxcv error."""


class InvalidArgumentError(ApproxCVError, ValueError):
    """An argument has a value outside its allowed set or range."""


class ArgumentTypeError(ApproxCVError, TypeError):
    """An argument has the wrong type."""


class InvalidDataError(ApproxCVError, ValueError):
    """Data have the wrong shape, dtype or contain NaN/inf or out-of-range values."""


class InvalidFoldsError(ApproxCVError, ValueError):
    """Base class for malformed cross-validation folds."""


class EmptyFoldError(InvalidFoldsError):
    """A fold leaves nothing out."""


class FoldIndexError(InvalidFoldsError):
    """A fold contains an index outside ``[0, n)`` or a non-integer index."""


class DuplicateIndexError(InvalidFoldsError):
    """A fold lists the same index twice."""


class DuplicateFoldIdError(InvalidFoldsError):
    """Two folds have the same id (results and checkpoints are matched by fold id)."""


class FoldRemovesAllError(InvalidFoldsError):
    """A fold leaves out every unit, so there is nothing to train on."""


class ScoredNotRemovedError(InvalidFoldsError):
    """A fold scores a unit it does not remove from training (``Folds(..., scored=)``: the
    scored units must be a subset of the removed ones)."""


class EmptyScoredError(EmptyFoldError):
    """A fold scores no unit (``Folds(..., scored=)``: every fold needs a non-empty scored
    set)."""


class InvalidGraphError(InvalidArgumentError):
    """A graph (an adjacency matrix or edge list) is not a valid simple undirected graph for
    the model: not symmetric, self-loops, weights other than 0/1, or an isolated node."""


class GraphTooWideError(InvalidArgumentError):
    """Exact variable elimination on a graph would need too much memory: the message names
    the induced width, the number of states and the bytes of the largest factor."""


class ProblemTooLargeError(InvalidDataError, MemoryError):
    """A dense computation would need more memory than is available: the message names
    the bytes needed, the bytes available and the largest size that fits (checked before
    anything is allocated, e.g. a GP on too many points)."""


class NotPositiveDefiniteError(ApproxCVError, ValueError):
    """A Hessian could not be made positive definite by the allowed jitter."""


class FitError(ApproxCVError, ValueError):
    """A fit failed (non-finite objective or no initialisation converged)."""


class CheckpointError(ApproxCVError, ValueError):
    """A checkpoint cannot be used: it is damaged, or it was written for other inputs.
    The message names the path and what is wrong (the damaged file, or the differing inputs)."""


class ResultFileError(ApproxCVError, ValueError):
    """A saved result cannot be read: no result at that path, damaged or mismatched files,
    or another format version. The message names the file."""


class DatasetNotInstalledError(ApproxCVError, FileNotFoundError):
    """A data set approxcv reads from another package is not installed (the message says
    how to install it)."""


class ApproxCVWarning(UserWarning):
    """Base class of approxcv warnings."""


class InexactFitWarning(ApproxCVWarning):
    """The supplied parameters are not a stationary point (large gradient norm)."""


class LocalOptimumWarning(ApproxCVWarning):
    """An exact refit reached a lower full-data objective than the supplied parameters: they
    are a local optimum that is not the best one found."""


class ConvergenceWarning(ApproxCVWarning):
    """An optimiser stopped before its convergence criterion was met."""


class JitterWarning(ApproxCVWarning):
    """A Hessian was not positive definite and jitter was added to it."""


class EmptyStateWarning(ApproxCVWarning):
    """A fitted latent state carries (almost) no data: an empty or collapsed component."""


class CompilationCacheWarning(ApproxCVWarning):
    """approxcv's compilation cache directory cannot be used (it cannot be created or
    written, or its lock file is broken): the cache is off in this process, said once; the
    message names the directory, the cause and how to move or turn off the cache."""


class UnreliableFoldWarning(ApproxCVWarning):
    """Some folds' estimates cannot be vouched for (``diagnostics['unreliable_folds']``)."""


class HeldFixedWarning(ApproxCVWarning):
    """Some parameters of a model converted from another library are held fixed: the data
    cannot move them (a probability at the boundary of its simplex, a start probability of
    one sequence) or the other library did not estimate them. The message names them and
    why; the model's ``prior.reasons`` records them."""


class ClosedExecutorError(InvalidArgumentError):
    """The ``executor`` cannot take tasks: a Dask ``Client`` that is closed (or closing, or
    cut off from its scheduler), or a ``concurrent.futures`` executor after ``shutdown()``.
    The message says which and how to get an open one."""


class NoWorkersError(InvalidArgumentError):
    """A Dask cluster has no worker to run approxcv's tasks: none when the run starts, or every
    worker gone mid-run for longer than the grace period (``APPROXCV_WORKER_GRACE``). The
    message says how much was finished and, for exact CV, whether a checkpoint holds it."""


class IncomparableResultsError(InvalidArgumentError):
    """Two results cannot be compared: they were computed on other data, at another level,
    on another number of units or on other folds. The message names the field that differs
    (``data``, ``level``, ``units``, ``folds``) and the two results."""


class ResultWriteError(ApproxCVError, ValueError):
    """A result or report cannot be written (a missing folder, no permission, a full disk).
    The message names the path and what to fix; an earlier file at that path is left intact."""


class ResultFileWarning(ApproxCVWarning):
    """Saved results were skipped because they cannot be read; the message lists each file
    and why."""


class NonIdentifiableWarning(ConvergenceWarning):
    """The data do not bound some parameters: the objective keeps decreasing along them
    (its minimiser lies at infinity) or has no curvature there; the fit is not converged."""


class GridEntryWarning(ApproxCVWarning):
    """Some entries of a :func:`~approxcv.select` grid failed (their error is in their row)
    or are flagged (over-parameterised, unconverged fit, non-positive-definite Hessian)."""


class BadlyScaledDataError(InvalidDataError, FitError):
    """Data whose scale makes the objective or its gradient overflow, or leaves the fit
    unable to converge; the message names the data and their scale and says to rescale
    (standardise) them."""


class UnsupportedMethodError(InvalidArgumentError):
    """The model does not support the requested cross-validation method (e.g. ``"ij"`` for
    a Gaussian process, or a leave-one-out-only estimator on K-fold folds); the message
    lists the methods it supports."""


class UnsupportedFoldsError(UnsupportedMethodError):
    """The model cannot cross-validate these folds yet: folds that remove units they do not
    score (:class:`~approxcv.folds.Folds` with ``scored=``, ``leave_future_out(horizon=)``,
    ``hblock``, ``neighbourhood(buffer=)``) on a model that computes its own methods (a
    Gaussian process)."""


class UnfittedEstimatorError(InvalidArgumentError):
    """An estimator of another library that has not been fitted (it has none of the
    fitted attributes a converter reads); the message says to fit it first."""


class UnsupportedEstimatorError(InvalidArgumentError):
    """A scikit-learn estimator, or one of its settings, that :mod:`approxcv.sklearn` cannot
    cross-validate approximately (another model class, a solver-specific objective,
    ``class_weight``, an L1 penalty of logistic regression, more than two classes, ...), or
    an hmmlearn model :func:`approxcv.models.from_hmmlearn` or a dynamax HMM
    :func:`approxcv.models.from_dynamax` cannot represent (a covariance type, several
    Poisson features, another class), or an sklearn-crfsuite CRF
    :func:`approxcv.models.from_crfsuite` cannot expand around (another algorithm than
    L-BFGS, an L1 penalty ``c1 > 0``, no L2 penalty); the message names the estimator and
    the setting, and what is supported."""
