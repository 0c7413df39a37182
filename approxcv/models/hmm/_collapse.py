"""Coinciding states of an HMM fit, and the split starts that leave them.

When two states of an HMM have the same emission parameters, the likelihood cannot tell
them apart: it depends only on the total probability of the group, and the chain's split
between the states is set by the prior alone (a Dirichlet with concentration above 1 makes
the transitions uniform). Such a point is a *symmetric stationary point* of the objective —
the fit of a model with fewer states, embedded in this one — and it is often a true local
minimum: EM and BFGS from starts near it stay there. It is not an estimate of the
``K``-state model, and every derivative at it (IJ, NS, their error estimates) describes
that stationary point, so the estimates vouch for the wrong basin (on the London
cyclist-deaths counts, ``PoissonHMM(2)`` stops at both rates 0.568 and every transition 0.5,
1.55 nats above the alternating-chain optimum; exact refits jump to the better basin and 290
of 400 folds differ by more than 1 %).

:func:`coinciding_states` finds the groups of states whose emission parameters agree to
:data:`COINCIDE_RTOL`; :func:`split_starts` builds starts that move the states of each group
apart along the spread of the model's own data-based starts, with the group's transitions
sticky, switching and as fitted — the directions in which a symmetric point can be left.
:meth:`HMM.fit` refits from them; where no start escapes, it warns
(:class:`~approxcv.errors.LocalOptimumWarning`) and :meth:`HMM.fit_concerns` marks every
fold of a cross-validation at those parameters as conditional on a fit that may not be the
optimum.
"""
from __future__ import annotations

import jax
import numpy as np

#: states whose emission parameters differ by at most this fraction of each parameter's
#: largest magnitude over the states coincide (a symmetric point is exact to the optimiser's
#: precision, about 1e-8; distinct states of real fits differ by far more than 1e-4)
COINCIDE_RTOL = 1e-4
#: multiples of the starts' spread by which :func:`split_starts` moves the states apart
SPLIT_SIZES = (0.5, 1.0)
#: a group's transitions in the split starts: (stay, move) mass of a row within the group
SPLIT_TRANSITIONS = ((0.9, 0.1), (0.1, 0.9))


def state_rows(model, params) -> np.ndarray:
    """``(K, P)``: every state's emission parameters (the fields of
    ``model.state_emission_fields``, each with the state axis first), flattened per state."""
    k = model.n_states
    fields = [np.asarray(getattr(params, f), np.float64).reshape(k, -1)
              for f in model.state_emission_fields]
    return np.concatenate(fields, axis=1) if fields else np.zeros((k, 0))


def coinciding_states(model, params) -> list[tuple[int, ...]]:
    """Groups (two or more states each, in increasing order) whose emission parameters
    coincide: states ``j, k`` with ``|e_jp - e_kp| <= COINCIDE_RTOL * max_l |e_lp|`` for
    every parameter ``p``, joined transitively; ``[]`` when every state is distinct (always
    for a model without per-state emission fields)."""
    rows = state_rows(model, params)
    k = rows.shape[0]
    if k < 2 or rows.shape[1] == 0 or not np.all(np.isfinite(rows)):
        return []
    tol = COINCIDE_RTOL * np.max(np.abs(rows), axis=0)
    same = np.all(np.abs(rows[:, None] - rows[None]) <= tol, axis=2)
    label = np.arange(k)
    for j in range(k):                        # union of the pairs (K is small)
        for i in np.flatnonzero(same[j]):
            a, b = label[j], label[i]
            label[label == max(a, b)] = min(a, b)
    groups = [tuple(int(s) for s in np.flatnonzero(label == g)) for g in np.unique(label)]
    return [g for g in groups if len(g) > 1]


def _spread(model, starts) -> list[np.ndarray]:
    """Per emission leaf, the standard deviation over the states of the unconstrained
    emission parameters of the model's own ``starts``, averaged over the starts (floored at
    0.1 of the leaf's typical magnitude plus 0.1, so a start whose states coincide still
    gives a direction)."""
    out = []
    for leaf in range(len(model.state_emission_fields)):
        u = np.stack([_emission_leaves(model, p)[leaf] for p in starts])     # (S, K, ...)
        sd = np.mean(np.std(u, axis=1), axis=0)
        out.append(np.maximum(sd, 0.1 * (np.mean(np.abs(u), axis=(0, 1)) + 1.0)))
    return out


def _emission_leaves(model, params) -> list[np.ndarray]:
    u = model.unconstrain(params)
    return [np.asarray(getattr(u, f), np.float64) for f in model.state_emission_fields]


def split_starts(model, params, groups, starts) -> list:
    """Starts that leave the symmetric point ``params`` (module docstring): for every size
    ``c`` in :data:`SPLIT_SIZES` and every pattern of :data:`SPLIT_TRANSITIONS`, the states
    ``g_1..g_m`` of each group moved to ``u_c + c * o_i * spread`` in unconstrained emission
    coordinates (``o_i`` evenly spaced in ``[-1, 1]``, ``spread`` from :func:`_spread` over
    the model's own ``starts``) and each group row's transition mass within the group
    redistributed as (stay, move); every other parameter as in ``params``."""
    spread = _spread(model, starts)
    base = model.unconstrain(params)
    trans = np.asarray(params.transition_matrix, np.float64)
    out = []
    for size in SPLIT_SIZES:
        for stay, move in SPLIT_TRANSITIONS:
            leaves = _emission_leaves(model, params)
            new_trans = trans.copy()
            for group in groups:
                g = np.asarray(group)
                offsets = np.linspace(-1.0, 1.0, g.size)
                for leaf, sd in zip(leaves, spread):
                    leaf[g] = leaf[g] + size * offsets.reshape((-1,) + (1,) * sd.ndim) * sd
                inside = trans[np.ix_(g, g)].sum(axis=1, keepdims=True)     # (m, 1)
                block = np.full((g.size, g.size), move / max(g.size - 1, 1))
                np.fill_diagonal(block, stay)
                new_trans[np.ix_(g, g)] = inside * block
            u = base._replace(**dict(zip(model.state_emission_fields, leaves)))
            p = model.constrain(u)
            p = p._replace(transition_matrix=new_trans / new_trans.sum(1, keepdims=True))
            out.append(type(params)(*[np.asarray(a, np.float64) for a in p]))
    return out


def describe_groups(groups) -> str:
    """``"states 0 and 1"``, ``"states 0, 1 and 2; states 3 and 4"``."""
    def one(g):
        return "states " + (", ".join(str(s) for s in g[:-1]) + f" and {g[-1]}")
    return "; ".join(one(g) for g in groups)


__all__ = ["coinciding_states", "split_starts", "state_rows", "describe_groups",
           "COINCIDE_RTOL"]
