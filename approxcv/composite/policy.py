"""Selection policies ``P(Z)`` and weights ``beta`` of stochastic composite likelihood (seed §3,
Definition 2, eq. 10-11).

A :class:`Policy` holds component groups (:mod:`.components`), the selection probability
``lambda_j = E Z_j`` and the weight ``beta_j`` of every component ``j`` (given per group:
a scalar for all its components, or one value per component), and the kind of ``P(Z)``:

* ``"bernoulli"``: ``Z_j ~ Ber(lambda_j)`` independently (``0 < lambda_j <= 1``);
* ``"multinomial"``: one group per sample, group ``g`` with probability ``lambda_g``
  (``sum_g lambda_g = 1``), all its components on: ``Cov(Z_i, Z_j) = [g_i = g_j] lambda_g
  - lambda_{g_i} lambda_{g_j}``;
* ``"product"``: a product of multinomials, one per group (seed "Product of Multinomials"):
  exactly one component of each group per sample, with the group's ``lambda_j`` (summing
  to 1 in the group; default uniform).

``Z`` is drawn per sample from ``(seed, sample index)`` alone (a counter-based generator,
:func:`sample_uniforms`), so a sample's draw does not depend on the other samples, the folds
or their order: leaving a sample out leaves its draw out.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from .._validate import check_choice
from ..errors import ArgumentTypeError, InvalidArgumentError
from .components import ComponentGroup, as_group

__all__ = ["Policy", "draw_selection", "sample_uniforms", "selection_moments", "KINDS"]

KINDS = ("bernoulli", "multinomial", "product")


def _per_group(value, groups, name):
    """``value`` (scalar, or one entry per group, each a scalar or one per component) as a
    tuple of per-component float tuples, one per group."""
    if value is None:
        return None
    if not isinstance(value, (list, tuple, np.ndarray)):
        value = [value] * len(groups)
    if len(value) != len(groups):
        raise InvalidArgumentError(f"`{name}` must be a scalar or have one entry per group "
                                   f"({len(groups)}), got {len(value)}")
    out = []
    for g, v in zip(groups, value):
        arr = np.asarray(v, dtype=np.float64)
        if arr.ndim == 0:
            arr = np.full(len(g), float(arr))
        if arr.shape != (len(g),):
            raise InvalidArgumentError(f"`{name}` of group {g.name!r} must be a scalar or "
                                       f"have {len(g)} entries (one per component), got "
                                       f"shape {arr.shape}")
        if not np.all(np.isfinite(arr)):
            raise InvalidArgumentError(f"`{name}` of group {g.name!r} must be finite")
        out.append(tuple(float(a) for a in arr))
    return tuple(out)


@dataclass(frozen=True, init=False)
class Policy:
    """An SCL policy: component groups, selection ``select`` (``lambda``), weight ``weight``
    (``beta``) and ``kind`` of ``P(Z)`` (module docstring).

    Args:
        groups: a list of :class:`ComponentGroup` (e.g. ``[pseudo_likelihood(bm, 1),
            pseudo_likelihood(bm, 2)]``) or of lists of ``(A, B)`` pairs (bound to a model
            by :meth:`bind`), or one group.
        select: selection probabilities, a scalar or one per group (each a scalar or one
            per component); default 1 (``"bernoulli"``), uniform over groups
            (``"multinomial"``) or over each group's components (``"product"``).
        weight: ``beta >= 0``, a scalar or one per group (each a scalar or one per
            component); default 1.
        kind: ``"bernoulli"``, ``"multinomial"`` or ``"product"``.

    Raises:
        InvalidArgumentError: a selection probability outside (0, 1] (a group that is never
            selected), probabilities of a multinomial not summing to 1, a negative weight,
            every weight 0 (an objective without data).
    """
    groups: tuple
    select: tuple
    weight: tuple
    kind: str

    def __init__(self, groups, select=None, weight=1.0, kind: str = "bernoulli"):
        check_choice("kind", kind, KINDS)
        if isinstance(groups, ComponentGroup):
            groups = [groups]
        if not isinstance(groups, (list, tuple)) or not groups:
            raise ArgumentTypeError("`groups` must be a non-empty list of component groups")
        if all(_is_pair(g) for g in groups):
            groups = [list(groups)]          # one user list of (A, B) pairs
        for i, g in enumerate(groups):
            if not (isinstance(g, ComponentGroup) or (isinstance(g, (list, tuple)) and g
                                                      and all(_is_pair(p) for p in g))):
                raise ArgumentTypeError(
                    f"`groups[{i}]` must be a ComponentGroup (full_likelihood(model), "
                    f"pseudo_likelihood(model, k), user_components(model, pairs)) or a "
                    f"non-empty list of (A, B) pairs of node indices, got {g!r}")
        groups = tuple(g if isinstance(g, ComponentGroup)
                       else ComponentGroup(f"user{i}" if len(groups) > 1 else "user",
                                           tuple(tuple(map(_as_nodes, p)) for p in g))
                       for i, g in enumerate(groups))
        if select is None:
            select = {"bernoulli": 1.0, "multinomial": 1.0 / len(groups),
                      "product": [1.0 / len(g) for g in groups]}[kind]
        lam = _per_group(select, groups, "select")
        beta = _per_group(weight, groups, "weight")
        for g, lg, bg in zip(groups, lam, beta):
            if any(v == 0.0 for v in lg):
                raise InvalidArgumentError(
                    f"`select`: group {g.name!r} has a component that is never selected "
                    "(probability 0); drop it from the policy instead")
            if any(not 0.0 < v <= 1.0 for v in lg):
                raise InvalidArgumentError(f"`select` of group {g.name!r} must lie in (0, 1], "
                                           f"got {[v for v in lg if not 0 < v <= 1][0]}")
            if any(v < 0 for v in bg):
                raise InvalidArgumentError(f"`weight` of group {g.name!r} must be >= 0")
        if not any(v > 0 for bg in beta for v in bg):
            raise InvalidArgumentError(
                "`weight`: every component has weight 0, so the objective does not depend on "
                "the data (nothing to estimate); give at least one component a positive "
                "weight")
        if kind == "multinomial":
            if any(len(set(lg)) != 1 for lg in lam):
                raise InvalidArgumentError("`select` of a multinomial policy is one "
                                           "probability per group (its components go together)")
            total = sum(lg[0] for lg in lam)
            if abs(total - 1.0) > 1e-9:
                raise InvalidArgumentError(f"`select` of a multinomial policy must sum to 1 "
                                           f"over the groups, got {total:.6g}")
        if kind == "product":
            for g, lg in zip(groups, lam):
                if abs(sum(lg) - 1.0) > 1e-9:
                    raise InvalidArgumentError(
                        f"`select` of group {g.name!r} of a product policy must sum to 1 over "
                        f"its {len(g)} components, got {sum(lg):.6g}")
        object.__setattr__(self, "groups", groups)
        object.__setattr__(self, "select", lam)
        object.__setattr__(self, "weight", beta)
        object.__setattr__(self, "kind", kind)

    # --------------------------------------------------------------- views
    @property
    def lam(self) -> np.ndarray:
        """Selection probability of every component ``(k,)``."""
        return np.concatenate([np.asarray(v) for v in self.select])

    @property
    def beta(self) -> np.ndarray:
        """Weight of every component ``(k,)``."""
        return np.concatenate([np.asarray(v) for v in self.weight])

    @property
    def group_of(self) -> np.ndarray:
        """Group index of every component ``(k,)``."""
        return np.concatenate([np.full(len(g), i) for i, g in enumerate(self.groups)])

    @property
    def items(self) -> tuple:
        return tuple(it for g in self.groups for it in g.items)

    @property
    def n_components(self) -> int:
        return sum(len(g) for g in self.groups)

    def bind(self, model) -> "Policy":
        """This policy with every group checked against ``model``."""
        groups = [as_group(model, g) for g in self.groups]
        return Policy(groups, [list(v) for v in self.select],
                      [list(v) for v in self.weight], self.kind)

    def with_weight(self, weight) -> "Policy":
        """A copy with other weights ``beta`` (per group)."""
        return Policy(self.groups, [list(v) for v in self.select], weight, self.kind)

    def label(self) -> str:
        """Description that tells policies apart, e.g. ``"PL1(lam=1, beta=1) +
        PL2(lam=0.3, beta=1)"``: a value shared by a group's components in its shortest
        exact form (``0.3`` and ``0.30001`` differ), one value per component as
        ``vec(min..max)#hash`` (the first 6 hex digits of a SHA-1 of the values, so two
        vectors with the same range differ)."""
        return " + ".join(f"{g.name}(lam={_fmt_values(lg)}, beta={_fmt_values(bg)})"
                          for g, lg, bg in zip(self.groups, self.select, self.weight)) + (
            "" if self.kind == "bernoulli" else f" [{self.kind}]")


def _fmt_value(v: float) -> str:
    """Shortest string that reads back as ``v`` (``1.0`` as ``"1"``)."""
    text = repr(float(v))
    return text[:-2] if text.endswith(".0") else text


def _fmt_values(values: tuple) -> str:
    """One value (:func:`_fmt_value`) or ``vec(min..max)#hash`` (``Policy.label``)."""
    if len(set(values)) == 1:
        return _fmt_value(values[0])
    digest = hashlib.sha1(np.asarray(values, dtype=np.float64).tobytes()).hexdigest()[:6]
    return f"vec({_fmt_value(min(values))}..{_fmt_value(max(values))})#{digest}"


def _is_nodes(s) -> bool:
    """An int or a flat sequence of ints (a node set)."""
    if isinstance(s, (int, np.integer)):
        return True
    return (isinstance(s, (list, tuple, np.ndarray))
            and all(isinstance(i, (int, np.integer)) for i in s))


def _is_pair(g) -> bool:
    """``g`` is one ``(A, B)`` pair of node sets."""
    return (isinstance(g, (list, tuple)) and len(g) == 2 and not isinstance(g, ComponentGroup)
            and all(_is_nodes(s) for s in g))


def _as_nodes(s):
    return tuple(sorted(int(i) for i in np.atleast_1d(np.asarray(s, dtype=np.int64))))


def draw_selection(policy: Policy, n: int, seed: int) -> np.ndarray:
    """``Z (n, k)`` 0/1 selections; sample ``i`` uses only the uniforms
    :func:`sample_uniforms` ``(seed, i)`` (module docstring)."""
    lam, group_of = policy.lam, policy.group_of
    k, n_groups = lam.shape[0], len(policy.groups)
    u = sample_uniforms(seed, n, k)
    if policy.kind == "bernoulli":
        return (u < lam).astype(np.float64)
    if policy.kind == "multinomial":
        p = np.zeros(n_groups)
        p[group_of] = lam
        chosen = np.minimum(np.searchsorted(np.cumsum(p), u[:, 0], side="right"),
                            n_groups - 1)
        return (group_of[None] == chosen[:, None]).astype(np.float64)
    # product: one component of each group, by the group's first uniform (totals are 1)
    first = _first_index(policy)
    upper = np.cumsum(lam) - (np.cumsum(lam) - lam)[first][group_of]
    r = u[:, first][:, group_of]
    return ((r >= upper - lam) & (r < upper)).astype(np.float64)


_GOLDEN = np.uint64(0x9E3779B97F4A7C15)


def _splitmix64(x):
    """The splitmix64 finaliser (Steele, Lea and Flood 2014) on uint64 arrays."""
    with np.errstate(over="ignore"):
        z = x + _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return z ^ (z >> np.uint64(31))


def sample_uniforms(seed: int, n: int, k: int) -> np.ndarray:
    """``U (n, k)`` uniforms in [0, 1): ``U_ij = splitmix64(splitmix64(splitmix64(seed) ^
    i) ^ j) / 2^64`` (53 bits), a counter-based generator: row ``i`` depends on ``(seed, i)``
    only, vectorised over samples, with nothing to compile."""
    s = _splitmix64(np.uint64(int(seed) & 0xFFFFFFFFFFFFFFFF))
    rows = _splitmix64(s ^ np.arange(int(n), dtype=np.uint64))
    bits = _splitmix64(rows[:, None] ^ np.arange(int(k), dtype=np.uint64)[None])
    return (bits >> np.uint64(11)).astype(np.float64) * 2.0 ** -53


def _first_index(policy) -> np.ndarray:
    sizes = [len(g) for g in policy.groups]
    return np.concatenate([[0], np.cumsum(sizes)[:-1]]).astype(np.int32)


def selection_moments(policy: Policy) -> tuple:
    """``(lambda (k,), Cov(Z) (k, k))`` of the policy's ``P(Z)`` (module docstring)."""
    lam = policy.lam
    g = policy.group_of
    if policy.kind == "bernoulli":
        return lam, np.diag(lam * (1.0 - lam))
    same = g[:, None] == g[None, :]
    if policy.kind == "multinomial":
        return lam, np.where(same, lam[:, None], 0.0) - np.outer(lam, lam)
    return lam, np.where(same, np.diag(lam) - np.outer(lam, lam), 0.0)
