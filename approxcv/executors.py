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
Results are fetched as batches finish, so ``on_result`` (a checkpoint) keeps every
finished batch even when the workers holding the others are lost. The wait is bounded: a
cluster left with no worker for :func:`worker_grace_seconds` seconds (``cluster.scale(0)``, every
worker killed, the scheduler unreachable) raises :class:`~approxcv.errors.NoWorkersError`
instead of waiting for ever, and a closed client raises
:class:`~approxcv.errors.ClosedExecutorError` before anything is sent.

In process, batches of compiled programs run in :func:`host_workers` threads at once (a
compiled call releases the GIL): the engine's chunks of folds and the parts of a long
Hessian sweep use the same count.
"""
from __future__ import annotations

import concurrent.futures
import hashlib
import math
import os
import queue
import re
import sys
import threading
import time
import uuid
from collections import Counter, OrderedDict
from concurrent.futures import Executor, ProcessPoolExecutor, ThreadPoolExecutor

import cloudpickle
import jax
import numpy as np

from ._progress import progress_bar
from ._runtime import carry_placement, current_platform
from .errors import ArgumentTypeError, ClosedExecutorError, InvalidArgumentError, NoWorkersError

__all__ = ["run_batches", "check_executor", "is_dask_client", "to_numpy",
           "worker_grace_seconds", "WORKER_GRACE", "host_workers", "MAX_HOST_WORKERS"]

#: seconds a run on a Dask cluster waits while the cluster has no worker before it raises
#: :class:`~approxcv.errors.NoWorkersError` (``APPROXCV_WORKER_GRACE`` overrides it)
WORKER_GRACE = 60.0
#: longest interval between two looks at the cluster while no batch finishes, in seconds
WORKER_POLL = 1.0

#: the most compiled programs run at once on CPU by default (:func:`host_workers`): each
#: holds its own batch, so memory grows with them, and a container's CPU quota may be
#: below the cores it can see; ``APPROXCV_THREADS`` may ask for more
MAX_HOST_WORKERS = 4


def host_workers() -> int:
    """Compiled programs approxcv runs at once in threads (chunks of folds,
    :func:`approxcv.engine.batching.in_chunks`; parts of a long Hessian sweep,
    :func:`approxcv.optim.newton.parallel_value_and_derivatives`): on CPU the cores this
    process may use (at most :data:`MAX_HOST_WORKERS`), as each such program — a recursion
    over time — runs on one core; elsewhere 1 (one accelerator runs one program at a
    time; the platform is the placement's,
    :func:`~approxcv._runtime.placement.current_platform`).
    The environment variable ``APPROXCV_THREADS`` sets it on CPU, above the cap too
    (``1``: one program at a time, e.g. on a machine shared with other jobs)."""
    if current_platform() != "cpu":
        return 1
    if os.environ.get("APPROXCV_THREADS"):          # the user's limit (1: one at a time)
        try:
            threads = int(os.environ["APPROXCV_THREADS"])
            if threads < 1:
                raise ValueError
            return threads
        except ValueError:
            raise InvalidArgumentError(
                "APPROXCV_THREADS must be a positive integer, got "
                f"{os.environ['APPROXCV_THREADS']!r}") from None
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:                      # not on Linux
        cores = os.cpu_count() or 1
    return int(max(1, min(cores, MAX_HOST_WORKERS)))


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


def worker_grace_seconds(grace: float | None = None) -> float:
    """Seconds to wait for a worker while a Dask cluster has none: ``grace``, else the
    environment variable ``APPROXCV_WORKER_GRACE``, else :data:`WORKER_GRACE`; ``inf`` waits
    for ever (a batch system whose workers may queue for longer)."""
    raw = grace if grace is not None else os.environ.get("APPROXCV_WORKER_GRACE", WORKER_GRACE)
    try:
        value = float(raw)
    except (TypeError, ValueError):
        value = math.nan
    if not value > 0:
        name = "`worker_grace`" if grace is not None else "APPROXCV_WORKER_GRACE"
        raise InvalidArgumentError(f"{name} must be a positive number of seconds (or 'inf'), "
                                   f"got {raw!r}")
    return value


def _scheduler_address(client) -> str:
    """The scheduler's address, read without a call (a closed client has no scheduler)."""
    return str(getattr(getattr(client, "scheduler", None), "address", None) or "unknown")


def _check_open(client) -> None:
    """Refuse a Dask client that is not running (closed, closing, or not connected)."""
    status = str(getattr(client, "status", "running"))
    if status != "running":
        raise ClosedExecutorError(
            f"`executor` is a Dask Client whose status is {status!r}, not 'running': it was "
            "closed (client.close(), or the end of its `with` block) or lost its scheduler. "
            "Pass an open client: Client(cluster) or Client('tcp://<scheduler address>')")


def _n_workers(client) -> int:
    """Workers the scheduler knows of; 0 while the client is cut off from it."""
    if str(getattr(client, "status", "running")) != "running":
        return 0
    try:
        info = client.scheduler_info(n_workers=1)
    except OSError:                 # the connection closed between the two looks
        return 0
    return int(info.get("n_workers", len(info.get("workers") or ())))


def _closed_mid_run(client, waiting: int, total: int) -> None:
    """Raise :class:`ClosedExecutorError` if the Dask ``client`` was closed while ``waiting``
    of ``total`` batches were not finished (a client reconnecting to its scheduler is not
    closed: it counts as a cluster without workers)."""
    status = str(client.status)
    if status in ("closing", "closed"):
        raise ClosedExecutorError(
            f"the Dask Client passed as `executor` was closed (status {status!r}) while "
            f"{waiting} of {total} batches were waiting; keep it open until the call returns")


def _check_workers(client) -> None:
    """Refuse a closed Dask client, or one whose cluster has no workers (its tasks would
    wait forever)."""
    _check_open(client)
    if not _n_workers(client):
        raise NoWorkersError(
            f"`executor` is a Dask Client with no workers (scheduler "
            f"{_scheduler_address(client)}); start workers (`dask worker <scheduler address>`) "
            "or wait for them with client.wait_for_workers(n) before passing it")


def check_executor(executor) -> None:
    """Refuse, before any work, an ``executor`` that cannot run tasks: one without
    ``submit`` (:class:`~approxcv.errors.ArgumentTypeError`), a Dask client that is closed
    (:class:`~approxcv.errors.ClosedExecutorError`) or has no workers
    (:class:`~approxcv.errors.NoWorkersError`)."""
    if executor is not None and not callable(getattr(executor, "submit", None)):
        raise ArgumentTypeError(
            f"`executor` must be None or have a submit() method, got {type(executor).__name__}")
    if is_dask_client(executor):
        _check_workers(executor)


def _dask_finished(client, futures, grace: float):
    """``(index, result)`` of every Dask future as it finishes, fetched one at a time (a
    result not yet fetched lives on its worker and is lost with it: the scheduler recomputes
    it, and it is fetched when it finishes again). Raises :class:`NoWorkersError` once the
    cluster has had no worker for ``grace`` seconds with nothing fetched,
    :class:`ClosedExecutorError` if the client closes meanwhile; errors of a task propagate."""
    distributed = sys.modules["distributed"]
    poll = min(WORKER_POLL, grace / 4)
    ready = queue.SimpleQueue()         # indices of futures whose done-callback fired

    def watch(i):
        futures[i].add_done_callback(lambda _, i=i: ready.put(i))

    for i in range(len(futures)):
        watch(i)
    pending = set(range(len(futures)))
    alone_since = None
    while pending:
        try:
            i = ready.get(timeout=poll)
        except queue.Empty:
            i = None
        if i in pending:
            if futures[i].status == "error":
                futures[i].result()                     # raises the task's error
            try:
                out = futures[i].result(timeout=poll)
            except TimeoutError:        # its worker left before the result was fetched
                watch(i)
            except distributed.client.FutureCancelledError:
                _closed_mid_run(client, len(pending), len(futures))
                raise
            else:
                pending.remove(i)
                alone_since = None
                yield i, out
                continue
        _closed_mid_run(client, len(pending), len(futures))
        if _n_workers(client):
            alone_since = None
        elif alone_since is None:
            alone_since = time.monotonic()
        elif time.monotonic() - alone_since >= grace:
            raise NoWorkersError(
                f"every worker of the Dask cluster (scheduler {_scheduler_address(client)}) "
                f"is gone: none for {grace:g} s while {len(pending)} of {len(futures)} "
                "batches were waiting. Start workers (cluster.scale(n), or `dask worker "
                "<scheduler address>`) and rerun; APPROXCV_WORKER_GRACE sets how many seconds "
                "to wait for them")


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


def _submit(executor, task, batches, desc: str):
    """Futures of ``task(*batch)`` for every batch on ``executor`` (see :func:`run_batches`);
    a closed executor is refused by name."""
    task = carry_placement(task)            # workers run where the caller's work runs
    if is_dask_client(executor):
        return _submit_dask(executor, cloudpickle.dumps(task), batches, desc)
    try:
        if _needs_pickling(executor):
            return _submit_pickled(executor, cloudpickle.dumps(task), batches)
        return [executor.submit(task, *b) for b in batches]
    except RuntimeError as err:
        if not isinstance(executor, Executor):
            raise
        raise ClosedExecutorError(
            f"`executor` ({type(executor).__name__}) does not take tasks: {err}. Pass an "
            "executor that is neither shut down (one used as `with ... as ex:` is, when its "
            "block ends) nor broken (a process pool whose worker died)") from None


def _finished(executor, futures, grace):
    """``(index, result)`` of every future: as each finishes on Dask or a
    ``concurrent.futures`` executor, in order on other executors."""
    if is_dask_client(executor):
        yield from _dask_finished(executor, futures, grace)
    elif all(isinstance(f, concurrent.futures.Future) for f in futures):
        index = {f: i for i, f in enumerate(futures)}
        for f in concurrent.futures.as_completed(futures):
            yield index[f], f.result()
    else:
        for i, f in enumerate(futures):
            yield i, f.result()


def run_batches(task, batches, executor=None, progress: bool = True, desc: str = "exact CV",
                sizes=None, on_result=None, threads: bool = False,
                worker_grace: float | None = None):
    """Run ``task(*batch)`` for every ``batch`` in ``batches`` and return results in order.

    Args:
        task: callable returning the result of one batch.
        batches: list of argument tuples.
        executor: ``None`` (in process), a ``concurrent.futures.Executor``, a Dask
            ``distributed.Client`` (open, with workers), or any object with ``submit``.
        threads: in process, run the batches on a pool of
            :func:`host_workers` threads (a compiled batch releases the
            GIL; one core each) instead of one after another. Exact CV's refits do: 96
            folds of a PoissonHMM(3) on 2,000 counts took 2.9-3.1 s on two cores against
            5.5-5.7 s one batch after another, the same numbers (1.6x on two Dask worker
            processes). Each thread holds a batch: memory grows with the workers.
        progress: a bar counting units (``sizes[i]`` per batch) or batches, on a terminal
            (:func:`~approxcv._progress.progress_bar`).
        on_result: optional ``on_result(index, result)`` called as each batch finishes
            (used for checkpointing): in the order they finish on a Dask client or a
            ``concurrent.futures`` executor, in submission order otherwise.
        worker_grace: seconds a Dask run waits while its cluster has no worker before it
            raises :class:`~approxcv.errors.NoWorkersError`; ``None``:
            :func:`~approxcv.executors.worker_grace_seconds` (``APPROXCV_WORKER_GRACE``, default
            :data:`WORKER_GRACE`).

    Raises:
        ClosedExecutorError: a closed Dask client or a shut-down executor.
        NoWorkersError: a Dask cluster without workers, at the start or for
            ``worker_grace`` seconds mid-run (``err.done`` / ``err.total``: units finished,
            counted as ``sizes``; finished batches went to ``on_result``).
    """
    check_executor(executor)
    grace = worker_grace_seconds(worker_grace) if is_dask_client(executor) else None
    sizes = [1] * len(batches) if sizes is None else list(sizes)
    results = [None] * len(batches)
    pool = None
    if executor is None and threads and len(batches) > 1 and host_workers() > 1:
        executor = pool = ThreadPoolExecutor(host_workers())
    futures = None if executor is None or not batches else _submit(executor, task, batches,
                                                                    desc)
    bar = progress_bar(sum(sizes), desc, progress)
    done = 0
    try:
        finished = (((i, task(*b)) for i, b in enumerate(batches)) if futures is None
                    else _finished(executor, futures, grace))
        for i, out in finished:
            results[i] = out
            if on_result is not None:
                on_result(i, out)
            done += sizes[i]
            bar.update(sizes[i])
    except NoWorkersError as err:
        for f in futures or ():
            f.cancel()
        err.done, err.total = done, sum(sizes)
        raise
    except BaseException:
        for f in futures or ():     # do not leave the other batches running
            f.cancel()
        raise
    finally:
        bar.close()
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
    return results
