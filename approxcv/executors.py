"""Where exact refits, derivative batches and grid fits run: in process, on a
``concurrent.futures`` executor, on a Dask distributed ``Client``, or on anything with the
same ``submit(fn, *args) -> future`` / ``future.result()`` seam.

Tasks are shipped with ``cloudpickle`` when the executor runs them in other processes,
because the objective is a closure over the model and its data. A worker unpickles each
task once: it keeps the task under the digest of its pickle (:data:`_WORKER_TASKS`), so the
objective inside is one object for every batch the worker runs, and the jitted refit built
from it (``batched_minimize`` is cached on the objective) is traced and compiled once per
worker, not once per batch; the persistent compilation cache lets workers after the first
load that compilation from disk.

Arguments and results cross to other processes as NumPy, never as JAX arrays (a worker
need not share the client's devices). On a Dask ``Client`` (:mod:`distributed` is imported
only when one is passed) the pickled task and every argument shared by all batches (the
data, the fit) are submitted once as small tasks of their own, so each worker fetches them
once rather than with every batch, and the scheduler can recompute them if the worker holding
them is lost; a batch whose worker dies is rerun by the scheduler on another worker
(``distributed.scheduler.allowed-failures`` deaths of one task raise ``KilledWorker``).
"""
from __future__ import annotations

import hashlib
import re
import sys
import threading
import uuid
from collections import Counter, OrderedDict
from concurrent.futures import Executor, ProcessPoolExecutor

import cloudpickle
import jax
import numpy as np
from tqdm.auto import tqdm

from ._compile import host_workers
from .errors import ArgumentTypeError, InvalidArgumentError

__all__ = ["run_batches", "is_dask_client", "to_numpy"]

#: unpickled tasks of this (worker) process by digest of their pickle, most recent last
_WORKER_TASKS: OrderedDict = OrderedDict()
#: tasks kept per worker (each holds an objective and its compiled programs)
MAX_WORKER_TASKS = 8
_WORKER_LOCK = threading.Lock()
#: how often this process unpickled each task digest (once per worker unless evicted)
WORKER_UNPICKLES: Counter = Counter()


def _worker_task(digest: str, payload: bytes):
    """The task pickled as ``payload``, unpickled on its first use in this process only."""
    with _WORKER_LOCK:
        task = _WORKER_TASKS.get(digest)
        if task is None:
            task = cloudpickle.loads(payload)
            _WORKER_TASKS[digest] = task
            WORKER_UNPICKLES[digest] += 1
            while len(_WORKER_TASKS) > MAX_WORKER_TASKS:
                _WORKER_TASKS.popitem(last=False)
        _WORKER_TASKS.move_to_end(digest)
    return task


def _call_pickled(digest: str, payload: bytes, *args):
    """Run a pickled task in a worker process (unpickled once per worker, see module);
    JAX arrays in its result come back as NumPy."""
    return to_numpy(_worker_task(digest, payload)(*args))


def _identity(x):
    """``x``: a task whose result is its argument (shared inputs of a Dask run)."""
    return x


def to_numpy(tree):
    """``tree`` with every JAX array leaf replaced by a NumPy array (other leaves kept)."""
    return jax.tree_util.tree_map(
        lambda x: np.asarray(x) if isinstance(x, jax.Array) else x, tree)


def _needs_pickling(executor) -> bool:
    return isinstance(executor, ProcessPoolExecutor) or not isinstance(executor, Executor)


def is_dask_client(executor) -> bool:
    """True for a :class:`distributed.Client` (without importing :mod:`distributed`: a
    client exists only where it was imported)."""
    distributed = sys.modules.get("distributed")
    return distributed is not None and isinstance(executor, distributed.Client)


def _check_workers(client) -> None:
    """Refuse a Dask client whose cluster has no workers (its tasks would wait forever)."""
    if not client.scheduler_info().get("workers"):
        raise InvalidArgumentError(
            f"`executor` is a Dask Client with no workers (scheduler {client.scheduler.address}); "
            "start workers (`dask worker <scheduler address>`) or wait for them with "
            "client.wait_for_workers(n) before passing it")


def _submit_pickled(executor, payload: bytes, batches):
    """Futures of ``_call_pickled(digest, payload, *batch)`` for every batch, arguments as
    NumPy."""
    digest = hashlib.sha256(payload).hexdigest()
    batches = [to_numpy(tuple(b)) for b in batches]
    return [executor.submit(_call_pickled, digest, payload, *b) for b in batches]


def _shared_positions(batches) -> list[int]:
    """Positions of the arguments (other than ``None``) that are one and the same object in
    every batch."""
    if len(batches) < 2:
        return []
    first = batches[0]
    return [j for j in range(len(first)) if first[j] is not None
            and all(len(b) == len(first) and b[j] is first[j] for b in batches[1:])]


def _submit_dask(client, payload: bytes, batches, desc: str):
    """Futures on a Dask ``client``: the payload and the shared arguments are each one
    task (fetched once per worker, recomputable if lost); every batch is one task named
    ``<desc>-<index>-<run>``, impure (``pure=False``: never merged with another run's)."""
    _check_workers(client)
    digest = hashlib.sha256(payload).hexdigest()
    run = uuid.uuid4().hex[:8]
    stem = re.sub(r"[^a-z0-9]+", "-", desc.lower()).strip("-") or "batch"
    shared = {j: client.submit(_identity, to_numpy(batches[0][j]), pure=False,
                               key=f"{stem}-input{j}-{run}")
              for j in _shared_positions(batches)}
    payload_f = client.submit(_identity, payload, pure=False, key=f"{stem}-task-{run}")
    return [client.submit(_call_pickled, digest, payload_f,
                          *[shared[j] if j in shared else to_numpy(a) for j, a in enumerate(b)],
                          pure=False, key=f"{stem}-{i}-{run}")
            for i, b in enumerate(batches)]


def run_batches(task, batches, executor=None, progress: bool = True, desc: str = "exact CV",
                sizes=None, on_result=None, threads: bool = False):
    """Run ``task(*batch)`` for every ``batch`` in ``batches`` and return results in order.

    Args:
        task: callable returning the result of one batch.
        batches: list of argument tuples.
        executor: ``None`` (in process), a ``concurrent.futures.Executor``, a Dask
            ``distributed.Client`` (it must have workers), or any object with ``submit``.
        threads: in process, run the batches on a pool of
            :func:`~approxcv._compile.host_workers` threads (a compiled batch releases the
            GIL; one core each) instead of one after another. Exact CV's refits do: 96
            folds of a PoissonHMM(3) on 2,000 counts took 2.9-3.1 s on two cores against
            5.5-5.7 s one batch after another, the same numbers (1.6x on two Dask worker
            processes). Each thread holds a batch: memory grows with the workers.
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
    pool = None
    if executor is None and threads and len(batches) > 1 and host_workers() > 1:
        from concurrent.futures import ThreadPoolExecutor
        executor = pool = ThreadPoolExecutor(host_workers())
    if executor is None or not batches:
        futures = None
    elif is_dask_client(executor):
        futures = _submit_dask(executor, cloudpickle.dumps(task), batches, desc)
    elif _needs_pickling(executor):
        futures = _submit_pickled(executor, cloudpickle.dumps(task), batches)
    else:
        futures = [executor.submit(task, *b) for b in batches]
    try:
        for i, batch in enumerate(batches):
            out = task(*batch) if futures is None else futures[i].result()
            results.append(out)
            if on_result is not None:
                on_result(i, out)
            bar.update(sizes[i])
    except BaseException:
        for f in futures or ():     # do not leave the other batches running
            f.cancel()
        raise
    finally:
        bar.close()
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    return results
