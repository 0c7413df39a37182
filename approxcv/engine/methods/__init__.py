"""Cross-validation methods, one module each, registered by name.

Every method is a function ``method(problem, folds, options) -> (fold_params, diagnostics)``:

* ``problem``: the :class:`~approxcv.problem.Problem` (objective and held-out functions of a
  flat unconstrained vector, data, the fitted vector);
* ``folds``: :class:`~approxcv.folds.Folds` (index arrays; weights are built per batch);
* ``options``: :class:`Options`;
* ``fold_params``: ``(n_folds, D)`` unconstrained per-fold parameters;
* ``diagnostics``: a dict; ``diagnostics["unreliable"]``, when present, marks folds the
  method cannot vouch for: ``{cause: (n_folds,) bool}`` (causes named in
  :data:`approxcv.engine.diagnostics.UNRELIABLE_CAUSES`) or one ``(n_folds,)`` bool mask;
  they are listed in ``CVResult.diagnostics["unreliable_folds"]`` (by cause in
  ``["unreliable_causes"]``) and never passed off as estimates.

The held-out evaluation is the engine's (:func:`approxcv.engine.batching.heldout_losses`),
not the method's. Register your own with :func:`register_method`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from ..._validate import check_choice, check_positive, check_positive_int
from ...errors import ArgumentTypeError, InvalidArgumentError
from ...optim.pd import MAX_DENSE_DIM
from ..error_estimate import DEFAULT_TOL

__all__ = ["Options", "check_options", "register_method", "get_method", "available_methods"]


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
    exact refits ``"auto"`` may spend (``None``: no limit); audit: exact refits of this many
    random folds to measure the error of a method; hessian_diagonal: ``lambda >= 0`` added to
    the diagonal of ``H`` by ``ij`` (dense) before factoring, to keep it invertible far from
    an optimum (recorded); extra: method-specific settings of user methods.

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
    audit: int = 0
    hessian_diagonal: float = 0.0
    extra: Any = None

    def __post_init__(self):
        check_options(self)

    def dense(self, dim: int, n_units: int = 0) -> bool:
        """Whether ``ij``/``ns`` form dense Hessians for ``dim`` parameters and ``n_units``
        units: ``"auto"`` does up to ``max_dense_dim`` parameters while ``H`` and the
        ``D x n`` Jacobian fit in :data:`~approxcv.optim.hessian.SWEEP_BYTES` (the sweep
        itself runs in chunks of tangents that fit, :func:`~approxcv.optim.hessian.
        sweep_chunk`), and is matrix-free (CG) beyond."""
        from ...optim.hessian import SWEEP_BYTES
        fits = 8.0 * dim * (dim + n_units) <= SWEEP_BYTES
        return self.solver == "dense" or (self.solver == "auto" and dim <= self.max_dense_dim
                                          and fits)


def check_options(options: Options) -> None:
    """Raise ``InvalidArgumentError`` naming the first field of ``options`` out of range:
    sizes and step limits are integers >= 1 (``max_dense_dim`` >= 0: 0 means never dense),
    ``cg_rtol`` lies in (0, 1), ``tol`` is positive, ``max_exact`` and ``audit`` are
    integers >= 0."""
    check_choice("solver", options.solver, ("auto", "dense", "cg"))
    check_choice("level", options.level, ("within", "structure"))
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
    tol = options.tol
    if isinstance(tol, bool) or not isinstance(tol, (int, float)) or not 0 < tol < float("inf"):
        raise InvalidArgumentError(f"`tol` must be a positive finite number, got {tol!r}")
    if options.max_exact is not None:
        check_positive_int("max_exact", options.max_exact, 0)
    check_positive_int("audit", options.audit, 0)
    lam = options.hessian_diagonal
    if isinstance(lam, bool) or not isinstance(lam, (int, float)) or not 0 <= lam < float("inf"):
        raise InvalidArgumentError(
            f"`hessian_diagonal` must be a finite number >= 0, got {lam!r}")
    if lam and options.solver == "cg":
        raise InvalidArgumentError("`hessian_diagonal` applies to dense Hessians; "
                                   "use solver='dense' or 'auto' with it")


_METHODS: dict[str, tuple[Callable, bool, bool]] = {}


def register_method(name: str, fn: Callable | None = None, *, local: bool = True,
                    refits: bool = False):
    """Register ``fn(problem, folds, options) -> (fold_params, diagnostics)`` under ``name``.

    Args:
        local: the method differentiates ``F`` at the fit, so a non-smooth model's smooth
            local surrogate (``model.local_model``) is used.
        refits: the method refits folds: it takes restarts from the model's own starts
            (``problem.starts``) and checkpoints (``options.checkpoint``); other methods
            refuse ``checkpoint=`` rather than ignore it.

    Usable as a decorator: ``@register_method("mine")``.
    """
    if not isinstance(name, str) or not name:
        raise ArgumentTypeError(f"`name` must be a non-empty string, got {name!r}")

    def add(f):
        if not callable(f):
            raise ArgumentTypeError(f"a method must be callable, got {type(f).__name__}")
        _METHODS[name] = (f, bool(local), bool(refits))
        return f
    return add if fn is None else add(fn)


def get_method(name: str) -> tuple[Callable, bool, bool]:
    """``(fn, local, refits)`` of the method registered as ``name``."""
    if name not in _METHODS:
        raise InvalidArgumentError(
            f"`method` must be one of {sorted(_METHODS)}, got {name!r} "
            "(register your own with approxcv.engine.methods.register_method)")
    return _METHODS[name]


def available_methods() -> list[str]:
    return sorted(_METHODS)


from . import auto, exact, ij, ns  # noqa: E402,F401  (register the built-in methods)
