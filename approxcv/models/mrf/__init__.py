"""Hidden Markov random fields on loopy graphs (structured-CV paper, §5 and L.3): the
hidden Potts model, marginalised exactly by variable elimination
(:mod:`approxcv.inference.elimination`), with leave-one-site-out and spatial-block CV."""
from .hidden_potts import FieldData, HiddenPotts, HiddenPottsGaussianParams, HiddenPottsParams

__all__ = ["HiddenPotts", "HiddenPottsParams", "HiddenPottsGaussianParams", "FieldData"]
