"""Gaussian-process models (latent GP, Laplace or EP posterior) under the model protocol:
:class:`GP` and its parameters :class:`GPParams`; its cross-validation methods are its
own (:mod:`.estimators`), at the fitted hyperparameters."""
from .model import GP, GPParams

__all__ = ["GP", "GPParams"]
