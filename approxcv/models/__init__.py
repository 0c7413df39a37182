"""Models: hyperparameters plus pure functions ``objective``, ``heldout`` and ``fit``."""
from .categorical_hmm import CategoricalHMM, CategoricalHMMParams
from .gaussian_hmm import GaussianHMM, GaussianHMMParams
from .hmm import HMM, Sequences
from .poisson_hmm import PoissonHMM, PoissonHMMParams

__all__ = ["HMM", "Sequences", "PoissonHMM", "PoissonHMMParams", "GaussianHMM",
           "GaussianHMMParams", "CategoricalHMM", "CategoricalHMMParams"]
