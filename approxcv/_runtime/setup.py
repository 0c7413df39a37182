"""The two global JAX settings approxcv makes, 64-bit floats and the persistent compilation
cache (docs/design.md, "Conventions"), made before any JAX array can exist, without
importing JAX where nothing needs it.

``import approxcv`` does not import JAX, so that ``approxcv --help`` answers at once. It
calls :func:`install`: if JAX is already imported, :func:`configure` runs at once;
otherwise a finder placed first on ``sys.meta_path`` waits for the first ``import jax`` in
the process (by approxcv's numerics or by the user's code) and runs :func:`configure` as soon
as the ``jax`` package has executed, before the importing code gets it back. Either way no
array is made, by approxcv or beside it, before 64-bit floats are on. The finder then
leaves ``sys.meta_path``; it looks at no other module.
"""
from __future__ import annotations

import sys

from . import compilation_cache
from .version import warn_if_deadlock_prone

__all__ = ["install", "configure", "configured", "cache_directory"]

_STATE = {"configured": False, "cache_dir": None}


def configured() -> bool:
    """Whether :func:`configure` has run in this process."""
    return _STATE["configured"]


def cache_directory() -> str | None:
    """The compilation cache directory :func:`configure` put in use (``None``: off, or not
    configured yet)."""
    return _STATE["cache_dir"]


def configure() -> str | None:
    """Turn on JAX's 64-bit floats and approxcv's compilation cache (once per process,
    importing JAX if it is not yet); return the cache directory in use (``None`` when off,
    see :mod:`approxcv._runtime.compilation_cache`)."""
    if _STATE["configured"]:
        return _STATE["cache_dir"]
    _STATE["configured"] = True
    _uninstall()
    import jax        # deferred on purpose: the point of this module
    import jaxlib
    warn_if_deadlock_prone(jaxlib.__version__)
    jax.config.update("jax_enable_x64", True)
    _STATE["cache_dir"] = compilation_cache.enable(jax.config, jaxlib.__version__)
    return _STATE["cache_dir"]


class _ConfigureAfter:
    """The loader of the ``jax`` package, which runs :func:`configure` right after the
    package has executed. The module gets the real loader before it executes."""

    def __init__(self, loader):
        self.loader = loader

    def create_module(self, spec):
        return self.loader.create_module(spec)

    def exec_module(self, module):
        module.__loader__ = module.__spec__.loader = self.loader
        self.loader.exec_module(module)
        configure()


class _JaxFinder:
    """A ``sys.meta_path`` finder that answers only for ``jax``: it finds the package with
    the finders after it and hands out its spec with the loader wrapped in
    :class:`_ConfigureAfter`."""

    def find_spec(self, name, path=None, target=None):
        if name != "jax" or _STATE["configured"]:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(name, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _ConfigureAfter(spec.loader)
                return spec
        return None


_FINDER = _JaxFinder()


def _uninstall() -> None:
    if _FINDER in sys.meta_path:
        sys.meta_path.remove(_FINDER)


def install() -> None:
    """Configure JAX now if it is imported, else when it is (see the module docstring)."""
    if _STATE["configured"]:
        return
    if "jax" in sys.modules:
        configure()
    elif _FINDER not in sys.meta_path:
        sys.meta_path.insert(0, _FINDER)
