"""Stochastic composite likelihood (Dillon & Lebanon): components, policies, the SCL
estimator with its sandwich variance and cost, the beta heuristic, and policy selection by
approximate cross-validation. See ``docs/composite.md``."""
from .beta import heuristic_beta
from .boltzmann import BoltzmannMachine
from .chains import BoltzmannChain, CRFComponents
from .components import ComponentGroup, full_likelihood, pseudo_likelihood, user_components
from .cost import component_costs, expected_cost
from .estimator import SCLFit, fit
from .model import SCLData, SCLModel, SCLParams
from .policy import Policy, draw_selection, selection_moments
from .selection import select_policy
from .variance import asymptotic_variance, sandwich

__all__ = ["BoltzmannMachine", "BoltzmannChain", "CRFComponents", "ComponentGroup", "full_likelihood", "pseudo_likelihood",
           "user_components", "Policy", "draw_selection", "selection_moments", "SCLModel",
           "SCLData", "SCLParams", "fit", "SCLFit", "sandwich", "asymptotic_variance",
           "component_costs", "expected_cost", "heuristic_beta", "select_policy"]
