"""How much memory a GP needs, checked before anything is allocated.

A GP's latent posterior is dense: the kernel matrix ``K``, its factor, the posterior
covariance ``Sigma`` and, per fold, rows of ``Sigma`` (``(F, m, n)``: as many as ``n`` rows
for leave-one-out) are ``n x n`` float64 arrays of ``8 n^2`` bytes each. Peak resident
memory measured above the process's own (2 inputs, probit, at supplied hyperparameters,
n = 1,000 and 3,000): LA leave-one-out 9.3 ``n x n`` arrays, EP leave-one-out 14 (its
sites' sweep holds more). :data:`MATRICES` counts 16 for every operation (a type-II MAP fit
differentiates through the posterior), so that ``n = 60,000`` (16 x 28.8 GB) is refused by
name in a millisecond instead of failing with XLA's ``RESOURCE_EXHAUSTED`` after 20 s.
"""
from __future__ import annotations

import math
import os

import jax

from ...errors import ProblemTooLargeError

__all__ = ["MATRICES", "gp_bytes", "available_bytes", "check_gp_memory"]

#: ``n x n`` float64 arrays a GP's fit or cross-validation may hold at once (module docstring)
MATRICES = 16


def gp_bytes(n: int) -> float:
    """Bytes a GP on ``n`` points may need at once: ``MATRICES * 8 n^2``."""
    return MATRICES * 8.0 * float(n) ** 2


def available_bytes() -> float | None:
    """Memory free for a new array on JAX's default device: the accelerator's limit less
    its use where JAX reports them, else the host's ``MemAvailable`` (Linux) or physical
    memory; ``None`` where none can be read (then nothing is refused)."""
    try:
        stats = jax.devices()[0].memory_stats()
    except Exception:       # noqa: BLE001 — backends without memory statistics
        stats = None
    if stats and "bytes_limit" in stats:
        return float(stats["bytes_limit"] - stats.get("bytes_in_use", 0))
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return float(line.split()[1]) * 1024.0
    except OSError:
        pass
    try:
        return float(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return None


def check_gp_memory(n: int, max_bytes: float | None = None) -> None:
    """Raise :class:`~approxcv.errors.ProblemTooLargeError` when a GP on ``n`` points needs
    more than ``max_bytes`` (default: :func:`available_bytes`), naming the bytes, the memory
    and the largest ``n`` that fits."""
    limit = available_bytes() if max_bytes is None else float(max_bytes)
    need = gp_bytes(n)
    if limit is None or need <= limit:
        return
    fits = int(math.sqrt(limit / (MATRICES * 8.0)))
    raise ProblemTooLargeError(
        f"a GP on n={n:,} points needs about {need / 2 ** 30:.3g} GiB ({MATRICES} "
        f"dense {n:,} x {n:,} float64 arrays) and {limit / 2 ** 30:.3g} GiB are available; "
        f"at most about n={fits:,} points fit: subsample the data (or set the model's "
        "`max_bytes` if the memory is there)")
