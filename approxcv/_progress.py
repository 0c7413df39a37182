"""``progress_bar``: approxcv's progress bar (tqdm), and what ``progress`` means.

Everywhere in approxcv ``progress=True`` means *show a bar while the work lasts, where a
person watches*: on a terminal (stderr is a TTY) or in a Jupyter kernel. tqdm draws on
stderr, so a script whose stderr goes to a file or a pipe — a batch job, a test, a CI log —
gets no bar and no bytes on stderr. ``progress=False`` never shows one. Entry points
(``cross_validate``, ``select``, exact CV's batches) default to ``True``; the engine's
inner functions take the caller's value.
"""
from __future__ import annotations

import contextlib
import contextvars
import sys

from tqdm.auto import tqdm

#: the folds a bar counts, when a run pads its folds (:func:`counting_first`)
_COUNTED: contextvars.ContextVar = contextvars.ContextVar("approxcv_counted_folds",
                                                          default=None)


def watched() -> bool:
    """Whether a person can see a bar: stderr is a terminal, or this is a Jupyter kernel."""
    try:
        if sys.stderr is not None and sys.stderr.isatty():
            return True
    except (AttributeError, ValueError):        # a replaced or closed stderr
        pass
    return "ipykernel" in sys.modules


def progress_bar(total: int, desc: str, progress: bool, **kwargs) -> tqdm:
    """A tqdm bar over ``total`` units, drawn only when ``progress`` and :func:`watched`
    (module docstring); ``leave=False``: it disappears when done."""
    return tqdm(total=total, desc=desc, disable=not (progress and watched()), leave=False,
                **kwargs)


@contextlib.contextmanager
def counting_first(k: int):
    """Bars over folds in the block count only the first ``k`` folds: a run whose folds
    are padded to a bucket size (:mod:`approxcv.engine.fold_buckets`) shows the user's."""
    token = _COUNTED.set(int(k))
    try:
        yield
    finally:
        _COUNTED.reset(token)


def counted(start: int, take: int, n: int) -> int:
    """Of the folds ``start .. start + take`` of ``n``, those a bar counts (all, outside
    :func:`counting_first`)."""
    k = _COUNTED.get()
    return take if k is None else max(0, min(start + take, k, n) - start)


__all__ = ["counted", "counting_first", "progress_bar", "watched"]
