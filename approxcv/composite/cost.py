"""Expected computational cost of an SCL policy (seed §3.1, §7).

The expected FLOP count of evaluating the SCL and its gradient on ``n`` samples is

    cost = n sum_j lambda_j c_j,

with ``c_j`` the FLOPs of component ``j``'s value and gradient on one sample, counted by the
component model's documented rule (``component_flops``; for a Boltzmann machine
``4 T (2^{|A u C|} + 2^{|C|})`` with ``T`` energy terms). The cost depends on ``lambda``
only, never on ``beta`` (§7).
"""
from __future__ import annotations

import numpy as np

__all__ = ["component_costs", "expected_cost", "realised_cost"]


def component_costs(base, policy, samples=None) -> np.ndarray:
    """``c_j`` of every component of ``policy`` on ``base``, ``(k,)`` (``samples``: the
    prepared data, for models whose cost depends on them, e.g. sentence lengths)."""
    return np.array([base.component_flops(item, samples) for item in policy.items],
                    dtype=np.float64)


def expected_cost(base, policy, n: int, samples=None) -> float:
    """``n sum_j lambda_j c_j``: expected FLOPs of the SCL value and gradient."""
    return float(n * np.dot(policy.lam, component_costs(base, policy, samples)))


def realised_cost(base, policy, selections, samples=None) -> float:
    """``sum_ij Z_ij c_j``: the FLOPs of the realised draws ``Z (n, k)``."""
    return float(np.sum(np.asarray(selections) @ component_costs(base, policy, samples)))
