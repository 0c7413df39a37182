"""``progress_bar``: approxcv's progress bar (tqdm), and what ``progress`` means.

Everywhere in approxcv ``progress=True`` means *show a bar while the work lasts, where a
person watches*: on a terminal (stderr is a TTY) or in a Jupyter kernel. tqdm draws on
stderr, so a script whose stderr goes to a file or a pipe — a batch job, a test, a CI log —
gets no bar and no bytes on stderr. ``progress=False`` never shows one. Entry points
(``cross_validate``, ``select``, exact CV's batches) default to ``True``; the engine's
inner functions take the caller's value.
"""
from __future__ import annotations

import sys

from tqdm.auto import tqdm


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


__all__ = ["progress_bar", "watched"]
