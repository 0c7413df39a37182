"""Weighted marginalisation over latent structure: pure functions on log-potentials."""
from . import chain, elimination

__all__ = ["chain", "elimination"]
