"""``WithNumbers``: a problem's data together with the model's numeric hyperparameters.

A model that declares numeric hyperparameters (a prior's concentration, a penalty weight)
has them travel with the data as arguments of the compiled programs, so that a model at
other values of them reuses every program (:mod:`approxcv.problem`); the engine passes
``Problem.data`` through whole and splits only the data leaves
(:mod:`approxcv.engine.accumulate`).
"""
from __future__ import annotations

from typing import Any, NamedTuple

__all__ = ["WithNumbers"]


class WithNumbers(NamedTuple):
    """``Problem.data`` of a model with numeric hyperparameters: the prepared data and
    ``{name: array}`` of those hyperparameters, arguments of the compiled programs."""
    data: Any
    numbers: dict
