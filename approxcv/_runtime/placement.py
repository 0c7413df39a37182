"""Where approxcv runs a model's programs: the accelerator, or the host's CPU.

A hidden-Markov model's fit, derivatives, error estimate and refits are recursions over
time: every step depends on the one before, so an accelerator runs them one small kernel
after another, bound by its launch latency, while the CPU runs each step in nanoseconds.
Measured on an NVIDIA H200 against its host's 16 CPU cores (``benchmarks/device.sh``,
``docs/guide.md``, "On a GPU: what it pays for"): exact refits of a PoissonHMM(2) 1.92 s on
the GPU against 0.16 s on the CPU (warm, T = 1,000, 8 folds); the IJ at T = 10^6 with 1,000
folds had not finished after 263 s on the GPU and took 202 s on the CPU. Dense algebra (a
GP) and wide batches (a CRF's sentences) gain from the GPU instead.

So a model says what its work is (``Model.compute_profile``: ``"sequential"`` for the
HMMs, ``None`` for the rest) and :func:`placed` runs it where that work is fast:

* ``"auto"`` (default): sequential work on the host's CPU when JAX's default backend is an
  accelerator; everything else where JAX puts it;
* ``"default"``: where JAX puts it (its default device), whatever the work;
* ``"cpu"``: on the host's CPU.

The choice is ``cross_validate(..., device=...)``'s option, or for every call the
environment variable ``APPROXCV_DEVICE``. On a machine without an accelerator every choice
is the CPU, and nothing changes. The placement is JAX's ``jax.default_device`` context:
arrays made elsewhere move to the chosen device when a program takes them; worker threads
of approxcv's own pools run under their caller's placement (:func:`carry_placement`).
"""
from __future__ import annotations

import contextlib
import contextvars
import functools
import os

import jax

from .._validate import check_choice

#: the choices of ``device=`` and ``APPROXCV_DEVICE``
DEVICE_CHOICES = ("auto", "default", "cpu")
#: work that :func:`placement_device` sends to the CPU under ``"auto"`` on an accelerator
SEQUENTIAL = "sequential"
#: the choice of the innermost :func:`placed` block: a model's fit inside
#: ``cross_validate(..., device=...)`` follows the call's choice
_CHOICE: contextvars.ContextVar = contextvars.ContextVar("approxcv_device", default=None)


def device_choice(choice: str | None = None) -> str:
    """``choice``, else that of the enclosing :func:`placed` block, else the environment
    variable ``APPROXCV_DEVICE``, else ``"auto"``; checked against :data:`DEVICE_CHOICES`."""
    if choice is None:
        if _CHOICE.get() is not None:
            return _CHOICE.get()
        env = os.environ.get("APPROXCV_DEVICE")
        return check_choice("APPROXCV_DEVICE", env, DEVICE_CHOICES) if env else "auto"
    return check_choice("device", choice, DEVICE_CHOICES)


def placement_device(profile: str | None, choice: str | None = None):
    """The device for work of kind ``profile`` under ``choice`` (module docstring), or
    ``None`` for JAX's default device."""
    choice = device_choice(choice)
    if choice == "default":
        return None
    if choice == "auto" and (profile != SEQUENTIAL or jax.default_backend() == "cpu"):
        return None
    return jax.devices("cpu")[0]


def current_platform() -> str:
    """The platform programs run on now: the placement's device (a
    ``jax.default_device`` context), else JAX's default backend."""
    device = jax.config.jax_default_device
    if device is None:
        return jax.default_backend()
    return device if isinstance(device, str) else device.platform


@contextlib.contextmanager
def placed(profile: str | None, choice: str | None = None):
    """Run the block on :func:`placement_device`'s device; yields the platform it runs on
    (``"cpu"``, ``"gpu"``, ...)."""
    choice = device_choice(choice)
    device = placement_device(profile, choice)
    token = _CHOICE.set(choice)
    try:
        if device is None:
            yield current_platform()
        else:
            with jax.default_device(device):
                yield device.platform
    finally:
        _CHOICE.reset(token)


class OnPlatform:
    """``fn`` called under ``jax.default_device`` of the first device of ``platform``;
    picklable when ``fn`` is, so that it carries a placement to a worker process too (the
    device is looked up where it runs)."""

    def __init__(self, fn, platform: str):
        self.fn, self.platform = fn, platform
        functools.update_wrapper(self, fn)

    def __call__(self, *args, **kwargs):
        with jax.default_device(jax.devices(self.platform)[0]):
            return self.fn(*args, **kwargs)


def carry_placement(fn):
    """``fn`` to run under the caller's placement (:class:`OnPlatform`), or ``fn`` itself
    when nothing is placed: for work handed to a worker thread, which does not inherit
    JAX's thread-local default device, or to a worker process."""
    device = jax.config.jax_default_device
    if device is None:
        return fn
    return OnPlatform(fn, device if isinstance(device, str) else device.platform)
