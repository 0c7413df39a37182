"""The registry of cross-validation methods: ``name -> (fn, local, refits)``.

A method is ``fn(problem, folds, options) -> (fold_params, diagnostics)``
(:mod:`approxcv.engine.methods` documents the contract and registers the built-in ones).
"""
from __future__ import annotations

from typing import Callable

from ..errors import ArgumentTypeError, InvalidArgumentError

__all__ = ["register_method", "get_method", "available_methods"]


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
            "(register your own with approxcv.register_method)")
    return _METHODS[name]


def available_methods() -> list[str]:
    return sorted(_METHODS)
