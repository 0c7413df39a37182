"""The one module of :mod:`approxcv.sklearn` that imports approxcv's penalty tuning (so a
move of the tuning code changes one line here)."""
from __future__ import annotations

from ..selection.tuning import aloocv_gradient, tune_regularization

__all__ = ["aloocv_gradient", "tune_regularization"]
