"""The one module of :mod:`approxcv.sklearn` that imports approxcv's penalty tuning (so a
move of the tuning code changes one line here)."""
from __future__ import annotations

from ..selection.tuning import tune_regularization
from ..selection.tuning_gradient import grid_aloocv

__all__ = ["grid_aloocv", "tune_regularization"]
