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
           "as_group", "check_component_model", "COMPONENT_METHODS"]

#: what a component model provides (:class:`~approxcv.composite.BoltzmannMachine`,
#: :class:`~approxcv.composite.BoltzmannChain`, :class:`~approxcv.composite.CRFComponents`)
COMPONENT_METHODS = ("full_components", "pseudo_components", "check_items", "stacks",
                     "unidentified", "stack_log_probs", "log_prob_samples", "prepare_samples",
                     "zero_params")


def check_component_model(model, name: str = "model"):
    """``model`` itself if it is a component model (it has every method of
    :data:`COMPONENT_METHODS`).

    Raises:
        ArgumentTypeError: it is not; the message names the missing methods and what to
            pass (a ``LinearChainCRF`` is wrapped as ``CRFComponents(crf)``).
    """
    missing = [m for m in COMPONENT_METHODS if not callable(getattr(model, m, None))]
    if not missing:
        return model
    hint = (f" To fit a {type(model).__name__} by composite likelihood, pass "
            "`approxcv.composite.CRFComponents(crf)`." if hasattr(model, "scores")
            and hasattr(model, "n_labels") else "")
    raise ArgumentTypeError(
        f"`{name}` must be a composite-likelihood component model (BoltzmannMachine, "
        f"BoltzmannChain or CRFComponents), got {type(model).__name__}, which lacks "
        f"{', '.join(missing[:4])}{f' and {len(missing) - 4} more' if len(missing) > 4 else ''}"
        f".{hint}")


@dataclass(frozen=True)
class ComponentGroup:
    """``name`` and ``items``: a tuple of hashable likelihood objects of one model."""
    name: str
    items: tuple

    def __len__(self) -> int:
        return len(self.items)


def full_likelihood(model) -> ComponentGroup:
    """The full likelihood ``log p(x)`` of ``model`` as one component, named ``"FL"``."""
    return ComponentGroup("FL", check_component_model(model).full_components())


def pseudo_likelihood(model, order: int = 1) -> ComponentGroup:
    """Order-``k`` pseudo-likelihood components of ``model``, named ``"PL<k>"``: every
    ``|A| = k`` node set conditioned on the rest (Boltzmann machine), or every window of
    ``k`` positions conditioned on its neighbours (chains)."""
    return ComponentGroup(f"PL{int(order)}",
                          check_component_model(model).pseudo_components(order))


def user_components(model, pairs, name: str = "user") -> ComponentGroup:
    """A user's list of ``(A, B)`` pairs, checked by ``model`` (disjoint, non-empty ``A``,
    nodes in range)."""
    return ComponentGroup(str(name), check_component_model(model).check_items(pairs))


def as_group(model, group) -> ComponentGroup:
    """``group`` as a :class:`ComponentGroup` of ``model`` (a group, or a list of pairs)."""
    check_component_model(model)
    if isinstance(group, ComponentGroup):
        return ComponentGroup(group.name, model.check_items(group.items))
    if isinstance(group, (list, tuple)):
        return user_components(model, group)
    raise ArgumentTypeError(f"a component group must be a ComponentGroup (full_likelihood, "
                            f"pseudo_likelihood) or a list of (A, B) pairs, got "
                            f"{type(group).__name__}")
