"""Choosing among models by cross-validation: :func:`select` ranks a grid of candidate
models (:mod:`~approxcv.selection.grid`), :func:`tune_regularization` tunes regularisation
weights by the gradient of approximate leave-one-out CV (:mod:`~approxcv.selection.tuning`,
its gradients in :mod:`~approxcv.selection.tuning_gradient` and its Newton steps in
:mod:`~approxcv.selection.tuning_newton`)."""
from .grid import EntryFailure, Selection, select
from .tuning import TuneResult, aloocv_gradient, tune_regularization

__all__ = ["select", "Selection", "EntryFailure", "tune_regularization", "aloocv_gradient",
           "TuneResult"]
