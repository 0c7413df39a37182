"""Likelihood components: m-pairs ``(A, B)`` (seed Definition 1, eq. 9) in named groups.

A :class:`ComponentGroup` is a named tuple of likelihood objects ``S(A_j, B_j) = log
p(x_{A_j} | x_{B_j})``, each one ``item`` the component model understands: for a
:class:`~approxcv.composite.BoltzmannMachine` a pair of sorted node tuples ``(A, B)``; for
the chain models a window order (their components are sums over positions, see their
modules). Groups are what a :class:`~approxcv.composite.Policy` selects and weights.

* :func:`full_likelihood`: the one component ``(V, {})``, ``log p(x)``;
* :func:`pseudo_likelihood` of order ``k``: every ``|A| = k`` subset conditioned on the
  rest, ``log p(x_A | x_{-A})`` (``k = 1``: Besag's pseudo-likelihood, seed eq. 7);
* :func:`user_components`: a user's list of ``(A, B)`` pairs.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import ArgumentTypeError

__all__ = ["ComponentGroup", "full_likelihood", "pseudo_likelihood", "user_components",
           "as_group"]


@dataclass(frozen=True)
class ComponentGroup:
    """``name`` and ``items``: a tuple of hashable likelihood objects of one model."""
    name: str
    items: tuple

    def __len__(self) -> int:
        return len(self.items)


def full_likelihood(model) -> ComponentGroup:
    """The full likelihood ``log p(x)`` of ``model`` as one component, named ``"FL"``."""
    return ComponentGroup("FL", model.full_components())


def pseudo_likelihood(model, order: int = 1) -> ComponentGroup:
    """Order-``k`` pseudo-likelihood components of ``model``, named ``"PL<k>"``: every
    ``|A| = k`` node set conditioned on the rest (Boltzmann machine), or every window of
    ``k`` positions conditioned on its neighbours (chains)."""
    return ComponentGroup(f"PL{int(order)}", model.pseudo_components(order))


def user_components(model, pairs, name: str = "user") -> ComponentGroup:
    """A user's list of ``(A, B)`` pairs, checked by ``model`` (disjoint, non-empty ``A``,
    nodes in range)."""
    return ComponentGroup(str(name), model.check_items(pairs))


def as_group(model, group) -> ComponentGroup:
    """``group`` as a :class:`ComponentGroup` of ``model`` (a group, or a list of pairs)."""
    if isinstance(group, ComponentGroup):
        return ComponentGroup(group.name, model.check_items(group.items))
    if isinstance(group, (list, tuple)):
        return user_components(model, group)
    raise ArgumentTypeError(f"a component group must be a ComponentGroup (full_likelihood, "
                            f"pseudo_likelihood) or a list of (A, B) pairs, got "
                            f"{type(group).__name__}")
