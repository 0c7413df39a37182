"""Weighted marginalisation over latent structure: pure functions on log-potentials."""
from . import chain

__all__ = ["chain"]
