"""Where exact refits run: in process, on a ``concurrent.futures`` executor, or anything
with the same ``submit(fn, *args) -> future`` / ``future.result()`` seam (e.g. a Dask
distributed ``Client``).

Tasks are shipped with ``cloudpickle`` when the executor runs them in other processes,
because the objective is a closure over the model and its data.
"""
from __future__ import annotations

from concurrent.futures import Executor, ProcessPoolExecutor

import cloudpickle
from tqdm.auto import tqdm

from .errors import ArgumentTypeError

__all__ = ["run_batches"]


def _call_pickled(payload: bytes, *args):
    """Unpickle a task in a worker process and run it."""
    return cloudpickle.loads(payload)(*args)


def _needs_pickling(executor) -> bool:
    return isinstance(executor, ProcessPoolExecutor) or not isinstance(executor, Executor)


def run_batches(task, batches, executor=None, progress: bool = True, desc: str = "exact CV",
                sizes=None, on_result=None):
    """Run ``task(*batch)`` for every ``batch`` in ``batches`` and return results in order.

    Args:
        task: callable returning the result of one batch.
        batches: list of argument tuples.
        executor: ``None`` (in process, sequential batches), a
            ``concurrent.futures.Executor``, or any object with ``submit``.
        progress: show a tqdm bar counting units (``sizes[i]`` per batch) or batches.
        on_result: optional ``on_result(index, result)`` called as each batch finishes
            (used for checkpointing), in submission order.
    """
    if executor is not None and not callable(getattr(executor, "submit", None)):
        raise ArgumentTypeError(
            f"`executor` must be None or have a submit() method, got {type(executor).__name__}")
    sizes = [1] * len(batches) if sizes is None else list(sizes)
    bar = tqdm(total=sum(sizes), desc=desc, disable=not progress, leave=False)
    results = []
    if executor is None:
        futures = None
    elif _needs_pickling(executor):
        payload = cloudpickle.dumps(task)
        futures = [executor.submit(_call_pickled, payload, *b) for b in batches]
    else:
        futures = [executor.submit(task, *b) for b in batches]
    try:
        for i, batch in enumerate(batches):
            out = task(*batch) if futures is None else futures[i].result()
            results.append(out)
            if on_result is not None:
                on_result(i, out)
            bar.update(sizes[i])
    finally:
        bar.close()
    return results
