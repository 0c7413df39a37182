"""Which array module maps a value: a leaf shared by the constraints and the Problem."""
from __future__ import annotations

import jax.numpy as jnp
import numpy as np

__all__ = ["array_module"]


def array_module(value):
    """NumPy for NumPy arrays, ``jax.numpy`` otherwise (traced or device arrays): starts,
    a user's parameters and fold parameters are mapped eagerly, where every ``jax.numpy``
    operation is a small program to compile in a fresh process (about 25 of them, 0.6 s,
    for one HMM fit and its IJ)."""
    return np if isinstance(value, (np.ndarray, np.generic)) else jnp
