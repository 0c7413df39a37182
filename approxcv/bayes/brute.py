"""Brute-force LOO: the posterior approximation recomputed without ``y_i`` for every ``i``
at fixed hyperparameters — the ground truth each fast estimator is checked against.

Fold ``i`` switches ``y_i`` off (weight 0: ``K`` and every latent stay, the likelihood
term goes), reruns the inference (Laplace Newton or EP) started from the full-data state
(Laplace: the full posterior's mode ``a``, so ``f = K a`` starts at the full mode; EP: the
full sites, the left-out one zeroed), and, for the folds that did not converge from
there, again from a cold start (:data:`STARTS`; ``diagnostics["start"]`` says which start
converged, -1 none: only those are flagged). Setting the left-out ``a_i = 0`` instead, as
before, moves every ``f_j`` by ``K_ji a_i``: on Poisson counts up to 80 the Newton search
from there stopped unconverged or diverged (half the refits of MASS ``quine``), so the
reference itself was wrong. It evaluates::

    log p(y_i | x_i, D_-i, theta) = log int p(y_i | f) N(f | m_i^(-i), v_i^(-i)) df

with the LOO marginal of ``f_i`` (exact for the Gaussian likelihood). Folds run in batches,
each one ``jit(vmap)`` of fixed shape (the last batch padded), through
:func:`approxcv.executors.run_batches` (in process, a ``concurrent.futures`` executor or
Dask), and finished batches are appended to a :class:`~approxcv.engine.checkpoint.Checkpoint`
bound to the data, likelihood, inference, hyperparameters and options, so an interrupted
run resumes. Fold ids are ``s * n + i`` for hyperparameter point ``s``.
"""
from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from .._compile import jit
from ..engine.checkpoint import Checkpoint, fingerprint, fold_digest
from ..executors import run_batches
from .posterior import latent_posterior, split_theta
from .quadrature import tilted_moments

__all__ = ["BruteBatch", "brute_force_lpd"]

#: EP's tolerance on the sites in the refits: a LOO density moves by O(tol), and parallel
#: EP's linear convergence makes the last digits the most expensive part of brute force
BRUTE_EP_TOL = 1e-7
_FIELDS = {"lpd": ("f8", ()), "converged": ("?", ()), "iterations": ("i8", ()),
           "start": ("i8", ())}


#: the starts a refit tries in turn, each only for the folds the ones before left
#: unconverged: the full-data state, then a cold start
STARTS = ("full", "cold")


@functools.partial(jit, static_argnames=("lik", "inference", "damping", "eta"))
def _leave_out_rows(theta, X, y, rows, start, *, lik, inference, damping, eta=1.0):
    """``(lpd, converged, iterations)`` of the folds ``rows (b,)`` at ``theta``, each refit
    started from ``start`` (Laplace ``a``, EP sites ``(2, n)``; EP zeroes the left-out
    site itself)."""
    n = y.shape[0]
    phi = split_theta(theta, X.shape[1])[1]

    def one(i):
        w = jnp.ones(n).at[i].set(0.0)
        post = latent_posterior(theta, X, y, w, start, lik=lik, inference=inference,
                                damping=damping, marginal=False, ep_tol=BRUTE_EP_TOL,
                                eta=eta)
        lpd = tilted_moments(lik, y[i][None], phi, post.mean[i][None], post.var[i][None])[0]
        return lpd[0], post.converged, post.iterations
    return jax.vmap(one)(rows)


class BruteBatch:
    """Picklable task: ``__call__(s, rows)`` refits the folds ``rows`` at point ``s``;
    batches are padded to ``pad_to`` rows so one program serves them all."""

    def __init__(self, fitted, pad_to: int):
        gp = fitted.gp
        self.lik, self.inference, self.damping = gp.lik, fitted.inference, gp.damping
        self.eta = gp.eta
        self.X, self.y = np.asarray(fitted.X), np.asarray(fitted.y)
        self.points = np.asarray(fitted.points)
        self.warm = np.asarray(fitted.posterior.warm)
        self.pad_to = pad_to

    def _run(self, s, rows, start):
        m = len(rows)
        padded = np.concatenate([rows, np.repeat(rows[-1:], self.pad_to - m)])
        out = _leave_out_rows(jnp.asarray(self.points[s]), jnp.asarray(self.X),
                              jnp.asarray(self.y), jnp.asarray(padded), jnp.asarray(start),
                              lik=self.lik, inference=self.inference, damping=self.damping,
                              eta=self.eta)
        return tuple(np.array(o)[:m] for o in out)

    def __call__(self, s: int, rows):
        """Refits from the starts of :data:`STARTS` in turn, the later ones only for the
        folds still unconverged; ``start`` records which one converged (-1: none did, the
        last start's values are kept, and flagged by the caller)."""
        rows = np.asarray(rows)
        starts = {"full": self.warm[s], "cold": np.zeros_like(self.warm[s])}
        lpd = np.full(len(rows), np.nan)
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


def _open_checkpoint(path, fitted, batch_size):
    print_ = fingerprint(data=(np.asarray(fitted.X), np.asarray(fitted.y)),
                         model=(fitted.gp.lik.name, repr(fitted.gp.lik)), scheme=None,
                         level="bayes-loo", params=np.asarray(fitted.points),
                         options={"inference": fitted.inference, "damping": fitted.gp.damping,
                                  "estimator": "brute", "ep_tol": BRUTE_EP_TOL,
                                  "starts": STARTS,
                                  **({} if fitted.gp.eta == 1.0 else {"eta": fitted.gp.eta})})
    return Checkpoint(path, print_, _FIELDS, finite=("lpd",))


def brute_force_lpd(fitted, executor=None, checkpoint=None, batch_size: int = 32,
                    progress: bool = False):
    """``(lpd (S, n), converged (S, n), iterations (S, n), start (S, n))`` of brute-force
    LOO at every hyperparameter point of ``fitted`` (module docstring)."""
    S, n = len(fitted.points), fitted.n
    per = max(1, min(int(batch_size), n))
    ids = [s * n + i for s in range(S) for i in range(n)]
    digests = [fold_digest(np.array([k])) for k in ids]
    ckpt = None if checkpoint is None else _open_checkpoint(checkpoint, fitted, per)
    done = {} if ckpt is None else ckpt.load(ids, digests)
    todo = [k for k in ids if k not in done]
    groups = []
    for s in range(S):
        mine = [k - s * n for k in todo if k // n == s]
        groups += [(s, mine[j:j + per]) for j in range(0, len(mine), per)]
    task = BruteBatch(fitted, per)

    def record(b, out):
        s, rows = groups[b]
        new = {s * n + r: {f: out[f][j] for f in _FIELDS} for j, r in enumerate(rows)}
        done.update(new)
        if ckpt is not None:
            ckpt.append(new, {k: digests[k] for k in new})

    run_batches(task, [(s, np.asarray(r)) for s, r in groups], executor=executor,
                progress=progress, desc="brute-force LOO", sizes=[len(r) for _, r in groups],
                on_result=record)
    out = {f: np.array([done[k][f] for k in ids]).reshape(S, n) for f in _FIELDS}
    return out["lpd"], out["converged"].astype(bool), out["iterations"], out["start"]
