"""Where exact refits run: in process, on a ``concurrent.futures`` executor, or anything
with the same ``submit(fn, *args) -> future`` / ``future.result()`` seam (e.g. a Dask
distributed ``Client``).

Tasks are shipped with ``cloudpickle`` when the executor runs them in other processes,
because the objective is a closure over the model and its data. A worker unpickles each
task once: it keeps the task under the digest of its pickle (:data:`_WORKER_TASKS`), so the
objective inside is one object for every batch the worker runs, and the jitted refit built
from it (``batched_minimize`` is cached on the objective) is traced and compiled once per
worker, not once per batch; the persistent compilation cache lets workers after the first
load that compilation from disk.
"""
from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from concurrent.futures import Executor, ProcessPoolExecutor

import cloudpickle
from tqdm.auto import tqdm

from .errors import ArgumentTypeError

__all__ = ["run_batches"]

#: unpickled tasks of this (worker) process by digest of their pickle, most recent last
_WORKER_TASKS: OrderedDict = OrderedDict()
#: tasks kept per worker (each holds an objective and its compiled programs)
MAX_WORKER_TASKS = 8
_WORKER_LOCK = threading.Lock()


def _worker_task(digest: str, payload: bytes):
    """The task pickled as ``payload``, unpickled on its first use in this process only."""
    with _WORKER_LOCK:
        task = _WORKER_TASKS.get(digest)
        if task is None:
            task = cloudpickle.loads(payload)
            _WORKER_TASKS[digest] = task
            while len(_WORKER_TASKS) > MAX_WORKER_TASKS:
                _WORKER_TASKS.popitem(last=False)
        _WORKER_TASKS.move_to_end(digest)
    return task


def _call_pickled(digest: str, payload: bytes, *args):
    """Run a pickled task in a worker process (unpickled once per worker, see module)."""
    return _worker_task(digest, payload)(*args)


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
        digest = hashlib.sha256(payload).hexdigest()
        futures = [executor.submit(_call_pickled, digest, payload, *b) for b in batches]
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
