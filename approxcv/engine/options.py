"""The options of a cross-validation run (:class:`Options`) and their checks.

A leaf module: every method, the audit and the GLM fast path read options; nothing here
imports a method.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from .._validate import check_choice, check_in_range, check_positive, check_positive_int
from .._runtime import device_choice
from ..errors import InvalidArgumentError
from ..optim.hessian import SWEEP_BYTES
from ..optim.pd import MAX_DENSE_DIM

__all__ = ["DEFAULT_TOL", "Options", "check_options"]

#: default ``tol``: folds whose estimated relative error of the fold loss exceeds it are
#: unreliable (and ``method="auto"`` refines them)
DEFAULT_TOL = 0.01


@dataclass(frozen=True)
class Options:
    """Settings of a cross-validation run (the keyword arguments of ``cross_validate``).

    solver: ``"auto"`` | ``"dense"`` | ``"cg"`` (how ``H`` is used by ``ij``/``ns``);
    max_dense_dim: largest ``D`` for which ``"auto"`` forms dense Hessians;
    cg_rtol, cg_max_steps: conjugate-gradient tolerance and step limit;
    batch_size: folds per vectorised batch (``None``: by memory);
    exact_batch_size: folds refitted together by one ``vmap``;
    exact_solver: refit optimiser (``None``: the model's preference, else by size);
    restarts: extra exact refits per fold from the model's own starts (``None``: by size);
    level: ``"within"`` | ``"structure"``; structure_batch_size: structures per derivative
    batch at the structure level; executor, checkpoint, progress, warn: see
    ``cross_validate``; tol: relative error of a fold loss above which an estimate is
    unreliable (``ij``/``ns`` error estimates) and ``"auto"`` refines it; max_exact: most
    exact refits ``"auto"`` may spend (``None``: no limit); refit_every: ``k``, on
    leave-future-out folds ``"auto"`` also refits every ``k``-th origin of its walk
    regardless of the error estimates (``None``: only where they exceed ``tol``); audit: exact refits of this many
    random folds to measure the error of a method; hessian_diagonal: ``lambda >= 0`` added to
    the diagonal of ``H`` by ``ij`` (dense) before factoring, to keep it invertible far from
    an optimum (recorded); in_sample: also the held-out losses at the full-data fit
    (``diagnostics["lpd_full"]``: ``p = lpd - elpd`` in ``to_arviz()``); error_estimate:
    ``"screened"`` (the IJ's per-fold estimate from one chord step where that vouches, the
    two steps elsewhere) or ``"full"`` (the two steps on every fold;
    :mod:`approxcv.engine.error_estimate`); device:
    ``"auto"``/``"default"``/``"cpu"``, where the run's programs go (``None``: the
    environment variable ``APPROXCV_DEVICE``, else ``"auto"``;
    :mod:`approxcv._runtime.placement`); extra: method-specific settings of user methods.

    Every field is checked on construction (:func:`check_options`): a value out of range
    raises :class:`~approxcv.errors.InvalidArgumentError` naming the option.
    """
    solver: str = "auto"
    max_dense_dim: int = MAX_DENSE_DIM
    cg_rtol: float = 1e-5
    cg_max_steps: int = 1000
    batch_size: int | None = None
    exact_batch_size: int = 8
    exact_solver: str | None = None
    restarts: int | None = None
    level: str = "within"
    structure_batch_size: int = 8
    executor: Any = None
    checkpoint: Any = None
    progress: bool = True
    warn: bool = True
    tol: float = DEFAULT_TOL
    max_exact: int | None = None
    refit_every: int | None = None
    audit: int = 0
    hessian_diagonal: float = 0.0
    in_sample: bool = False
    error_estimate: str = "screened"
    device: str | None = None
    extra: Any = None

    def __post_init__(self):
        check_options(self)
        # NumPy scalars (np.float32(1e-3), np.int64(8)) and 0-d arrays are accepted; the
        # run sees Python numbers (they key compiled programs and checkpoints)
        for name in ("tol", "cg_rtol", "hessian_diagonal"):
            object.__setattr__(self, name, float(getattr(self, name)))
        for name in ("max_dense_dim", "cg_max_steps", "batch_size", "exact_batch_size",
                     "structure_batch_size", "restarts", "max_exact", "refit_every",
                     "audit"):
            if getattr(self, name) is not None:
                object.__setattr__(self, name, int(getattr(self, name)))

    def dense(self, dim: int, n_units: int = 0) -> bool:
        """Whether ``ij``/``ns`` form dense Hessians for ``dim`` parameters and ``n_units``
        units: ``"auto"`` does up to ``max_dense_dim`` parameters while ``H`` and the
        ``D x n`` Jacobian fit in :data:`~approxcv.optim.hessian.SWEEP_BYTES` (the sweep
        itself runs in chunks of tangents that fit, :func:`~approxcv.optim.hessian.
        sweep_chunk`), and is matrix-free (CG) beyond."""
        fits = 8.0 * dim * (dim + n_units) <= SWEEP_BYTES
        return self.solver == "dense" or (self.solver == "auto" and dim <= self.max_dense_dim
                                          and fits)


def check_options(options: Options) -> None:
    """Raise ``InvalidArgumentError`` naming the first field of ``options`` out of range:
    sizes and step limits are integers >= 1 (``max_dense_dim`` >= 0: 0 means never dense),
    ``cg_rtol`` lies in (0, 1), ``tol`` is positive, ``max_exact`` and ``audit`` are
    integers >= 0, ``refit_every`` an integer >= 1 or ``None``."""
    check_choice("solver", options.solver, ("auto", "dense", "cg"))
    check_choice("level", options.level, ("within", "structure"))
    check_choice("error_estimate", options.error_estimate, ("screened", "full"))
    check_positive_int("max_dense_dim", options.max_dense_dim, 0)
    if check_positive("cg_rtol", options.cg_rtol) >= 1.0:
        raise InvalidArgumentError(f"`cg_rtol` must be < 1, got {options.cg_rtol!r}")
    check_positive_int("cg_max_steps", options.cg_max_steps)
    if options.batch_size is not None:
        check_positive_int("batch_size", options.batch_size)
    check_positive_int("exact_batch_size", options.exact_batch_size)
    check_positive_int("structure_batch_size", options.structure_batch_size)
    if options.restarts is not None:
        check_positive_int("restarts", options.restarts, 0)
    check_positive("tol", options.tol)
    if options.max_exact is not None:
        check_positive_int("max_exact", options.max_exact, 0)
    if options.refit_every is not None:
        check_positive_int("refit_every", options.refit_every, 1)
    check_positive_int("audit", options.audit, 0)
    device_choice(options.device)
    if not isinstance(options.in_sample, bool):
        raise InvalidArgumentError(
            f"`in_sample` must be True or False, got {options.in_sample!r}")
    lam = check_in_range("hessian_diagonal", options.hessian_diagonal, 0.0, float("inf"),
                         "left")
    if lam and options.solver == "cg":
        raise InvalidArgumentError("`hessian_diagonal` applies to dense Hessians; "
                                   "use solver='dense' or 'auto' with it")
