"""Weighted marginalisation over latent structure: pure functions on log-potentials
(``chain``, ``chain_lanes``, ``crf``, ``elimination``) and the Gaussian latent kernels
(``latent_gaussian``: Laplace, EP, cavities, quadrature)."""
from . import chain, elimination

__all__ = ["chain", "elimination"]
