"""Exact cross-validation of a Gaussian latent model at fixed hyperparameters: the latent
posterior (Laplace or EP) recomputed without the points of each fold, then the held-out
predictive of each left-out point — the reference every fast estimator is checked against.

Fold ``S`` switches its points off (weight 0: ``K`` and every latent stay, their likelihood
terms go), reruns the inference started from the full-data state (Laplace: the full mode's
``a``; EP: the full sites, the left-out ones zeroed by :func:`~approxcv.inference.latent_gaussian.ep.ep_fit`)
and, for the folds that did not converge from there, again from a cold start
(:data:`STARTS`; ``start`` says which start converged, -1 none). Each left-out point's loss
is::

    -log p(y_i | y_-S, theta) = -log int p(y_i | f) N(f | m_i^(-S), v_i^(-S)) df

with the refitted marginal of ``f_i`` (exact for the Gaussian likelihood). Folds run in
batches, each one ``jit(vmap)`` of fixed shape (the last batch padded), through
:func:`approxcv.executors.run_batches` (in process, a ``concurrent.futures`` executor or
Dask); finished batches are appended to a :class:`~approxcv.engine.checkpoint.Checkpoint`
bound to the data, likelihood, inference, hyperparameters, folds and options, so an
interrupted run resumes. Fold ids are ``s * F + f`` for hyperparameter point ``s``.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from ..._runtime import jit
from ...engine.checkpoint import Checkpoint, fingerprint, fold_digest
from ...executors import run_batches
from ...inference.latent_gaussian.posterior import latent_posterior, split_theta
from ...inference.latent_gaussian.quadrature import tilted_moments

__all__ = ["RefitBatch", "refit_lpd", "heldout_lpd", "REFIT_EP_TOL", "STARTS"]

#: EP's tolerance on the sites in the refits: a predictive density moves by O(tol), and
#: parallel EP's linear convergence makes the last digits the most expensive part
REFIT_EP_TOL = 1e-7
_FIELDS = {"lpd": ("f8", None), "converged": ("?", ()), "iterations": ("i8", ()),
           "start": ("i8", ())}

#: the starts a refit tries in turn, each only for the folds the ones before left
#: unconverged: the full-data state, then a cold start
STARTS = ("full", "cold")


def heldout_lpd(theta, X, y, weights, start, *, lik, inference, damping, eta=1.0):
    """``(lpd (n,), converged, iterations)``: every point's ``log p(y_i | y_w, theta)`` under
    the posterior refitted on the points with weight 1, started from ``start``."""
    post = latent_posterior(theta, X, y, weights, start, lik=lik, inference=inference,
                            damping=damping, marginal=False, ep_tol=REFIT_EP_TOL, eta=eta)
    phi = split_theta(theta, X.shape[1])[1]
    return tilted_moments(lik, y, phi, post.mean, post.var)[0], post.converged, \
        post.iterations


@functools.partial(jit, static_argnames=("lik", "inference", "damping", "eta"))
def _refit_rows(theta, X, y, index, start, *, lik, inference, damping, eta=1.0):
    """``(lpd (b, m), converged (b,), iterations (b,))`` of the folds ``index (b, m)``
    (rows padded with ``n``) at ``theta``, each refit started from ``start``."""
    n = y.shape[0]
    phi = split_theta(theta, X.shape[1])[1]

    def _one(rows):
        """One fold's refit and its left-out points' log predictive densities."""
        ok = rows < n
        w = jnp.ones(n).at[rows].set(0.0, mode="drop")
        post = latent_posterior(theta, X, y, w, start, lik=lik, inference=inference,
                                damping=damping, marginal=False, ep_tol=REFIT_EP_TOL,
                                eta=eta)
        r = jnp.where(ok, rows, 0)
        lpd = tilted_moments(lik, y[r], phi, post.mean[r], post.var[r])[0]
        return jnp.where(ok, lpd, 0.0), post.converged, post.iterations
    return jax.vmap(_one)(jnp.asarray(index))


class RefitBatch:
    """Picklable task: ``__call__(s, rows)`` refits the folds ``rows`` (positions in
    ``index``) at point ``s``; batches are padded to ``pad_to`` folds so one program
    serves them all."""

    def __init__(self, lik, inference, damping, X, y, points, warm, index, pad_to: int,
                 eta: float = 1.0):
        self.lik, self.inference, self.damping, self.eta = lik, inference, damping, eta
        self.X, self.y = np.asarray(X), np.asarray(y)
        self.points, self.warm = np.asarray(points), np.asarray(warm)
        self.index = np.asarray(index)
        self.pad_to = pad_to

    def _run(self, s, rows, start):
        m = len(rows)
        padded = np.concatenate([rows, np.repeat(rows[-1:], self.pad_to - m)])
        out = _refit_rows(jnp.asarray(self.points[s]), jnp.asarray(self.X),
                          jnp.asarray(self.y), jnp.asarray(self.index[padded]),
                          jnp.asarray(start), lik=self.lik, inference=self.inference,
                          damping=self.damping, eta=self.eta)
        return tuple(np.array(o)[:m] for o in out)

    def __call__(self, s: int, rows):
        """Refits from the starts of :data:`STARTS` in turn, the later ones only for the
        folds still unconverged; ``start`` records which one converged (-1: none did, the
        last start's values are kept, and flagged by the caller)."""
        rows = np.asarray(rows)
        starts = {"full": self.warm[s], "cold": np.zeros_like(self.warm[s])}
        lpd = np.full((len(rows), self.index.shape[1]), np.nan)
        conv = np.zeros(len(rows), bool)
        its = np.zeros(len(rows), int)
        which = np.full(len(rows), -1)
        todo = np.arange(len(rows))
        for k, name in enumerate(STARTS):
            l_, c_, i_ = self._run(s, rows[todo], starts[name])
            lpd[todo], conv[todo] = l_, c_.astype(bool)
            its[todo] += i_.astype(int)
            which[todo[conv[todo]]] = k
            todo = todo[~conv[todo]]
            if not len(todo):
                break
        return {"lpd": lpd, "converged": conv, "iterations": its, "start": which}


def _open_checkpoint(path, task, key):
    fields = {**_FIELDS, "lpd": ("f8", (task.index.shape[1],))}
    print_ = fingerprint(data=(task.X, task.y), model=key, scheme=None, level="gp-refits",
                         params=task.points,
                         options={"inference": task.inference, "damping": task.damping,
                                  "ep_tol": REFIT_EP_TOL, "starts": STARTS,
                                  **({} if task.eta == 1.0 else {"eta": task.eta})})
    return Checkpoint(path, print_, fields, finite=("lpd",))


def refit_lpd(task: RefitBatch, key, executor=None, checkpoint=None, progress: bool = False):
    """``(lpd (S, F, m), converged (S, F), iterations (S, F), start (S, F))`` of the refits
    of every fold of ``task.index`` at every hyperparameter point (module docstring);
    ``key``: a hashable description of the model for the checkpoint."""
    S, F, per = len(task.points), len(task.index), task.pad_to
    ids = [s * F + f for s in range(S) for f in range(F)]
    digests = [fold_digest(task.index[k % F]) for k in ids]
    ckpt = None if checkpoint is None else _open_checkpoint(checkpoint, task, key)
    done = {} if ckpt is None else ckpt.load(ids, digests)
    todo = [k for k in ids if k not in done]
    groups = []
    for s in range(S):
        mine = [k - s * F for k in todo if k // F == s]
        groups += [(s, mine[j:j + per]) for j in range(0, len(mine), per)]

    def record(b, out):
        s, rows = groups[b]
        new = {s * F + r: {f: out[f][j] for f in _FIELDS} for j, r in enumerate(rows)}
        done.update(new)
        if ckpt is not None:
            ckpt.append(new, {k: digests[k] for k in new})

    run_batches(task, [(s, np.asarray(r)) for s, r in groups], executor=executor,
                progress=progress, desc="GP refits", sizes=[len(r) for _, r in groups],
                on_result=record)
    out = {f: np.array([done[k][f] for k in ids]) for f in _FIELDS}
    return (out["lpd"].reshape(S, F, -1), out["converged"].astype(bool).reshape(S, F),
            out["iterations"].reshape(S, F), out["start"].reshape(S, F))
