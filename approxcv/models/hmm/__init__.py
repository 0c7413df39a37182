"""Hidden Markov models and the time-varying Poisson event model (structured-CV paper).

One base class (:class:`HMM`, in :mod:`.base`) holds the chain — initial distribution,
transition matrix, forward filtering in :mod:`approxcv.inference.chain` — and the fitting
(EM, quasi-Newton polish); each emission family is one file that adds its parameters, its
prior and its per-state log-likelihoods.
"""
from .base import HMM, Forecast, Sequences
from .poisson_hmm import PoissonHMM, PoissonHMMParams
from .gaussian_hmm import GaussianHMM, GaussianHMMParams
from .categorical_hmm import CategoricalHMM, CategoricalHMMParams
from .arhmm import ARHMM, ARHMMParams
from .neural_arhmm import NeuralARHMM, NeuralARHMMParams
from .time_varying_poisson import TimeVaryingPoisson, TimeVaryingPoissonParams
from .hmmlearn import from_hmmlearn, hmmlearn_data
from .dynamax import from_dynamax, dynamax_data

__all__ = ["HMM", "Forecast", "Sequences", "PoissonHMM", "PoissonHMMParams", "GaussianHMM",
           "GaussianHMMParams", "CategoricalHMM", "CategoricalHMMParams", "ARHMM",
           "ARHMMParams", "NeuralARHMM", "NeuralARHMMParams", "TimeVaryingPoisson",
           "TimeVaryingPoissonParams", "from_hmmlearn", "hmmlearn_data", "from_dynamax",
           "dynamax_data"]
