"""How approxcv gets JAX to compile little, once, and run in the right place.

* ``setup.py``: the two global JAX settings (64-bit floats, the compilation cache), made
  when JAX is first imported; ``version.py``: the guard against jaxlib releases that can
  deadlock;
* ``compilation_cache.py``: JAX's persistent compilation cache under the user's cache
  directory; ``program_cache.py``: approxcv's own store of compiled programs, keyed before
  tracing; ``compile.py``: ``jit``, ``jax.jit`` with approxcv's compile options through that
  store; ``workarounds.py``: every use of JAX's and jaxlib's private API;
* ``placement.py``: where a model's programs run (the accelerator or the host's CPU);
* ``sizes.py``: sizes rounded up to a few buckets, so that one program serves many;
  ``batched_map.py``: ``map_in_batches``, a batched ``lax.map`` with one copy of its
  function; ``arrays.py``: which array module maps a value.

The rest of approxcv imports the names below from this package, never its modules. Imports
run one way: this package imports nothing of approxcv outside itself but ``errors`` and
``_validate`` (docs/design.md, "Layers"; ``tests/test_layout.py``).

``import approxcv`` runs this ``__init__`` and must not import JAX, so the names of the
modules that import no JAX (``setup``, ``sizes``) are bound here, and those of the modules
that do are looked up on first use (PEP 562 ``__getattr__``, as ``approxcv/__init__.py``
does); the ``TYPE_CHECKING`` block names them for readers and tools. They are not bound
in this module's namespace once looked up: approxcv's program cache hashes its modules'
settings (``program_cache.namespace_digest``), which must not depend on which names have
been used.
"""
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

from .setup import configure, install
from .sizes import LENGTH_BITS, count_bucket, length_bucket

if TYPE_CHECKING:
    from .arrays import array_module
    from .batched_map import map_in_batches, pad_rows
    from .compile import jit
    from .placement import SEQUENTIAL, carry_placement, current_platform, device_choice, placed

#: names looked up on first use (their modules import JAX): the module that defines each
_ON_FIRST_USE = {"jit": "compile", "map_in_batches": "batched_map", "pad_rows": "batched_map",
                 "array_module": "arrays",
                 "SEQUENTIAL": "placement", "carry_placement": "placement",
                 "current_platform": "placement", "device_choice": "placement",
                 "placed": "placement"}


def __getattr__(name):
    if name in _ON_FIRST_USE:
        return getattr(importlib.import_module("." + _ON_FIRST_USE[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["install", "configure", "jit", "map_in_batches", "array_module", "placed",
           "current_platform", "carry_placement", "device_choice", "SEQUENTIAL",
           "length_bucket", "count_bucket", "LENGTH_BITS", "pad_rows"]
