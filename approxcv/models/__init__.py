"""Models: hyperparameters plus pure functions ``objective``, ``heldout`` and ``fit``."""
from .elastic_net import (ElasticNet, ElasticNetOnSupport, ElasticNetParams,
                          SupportChangeWarning)
from .erm import ERM, ERMData
from .logistic import Logistic, LogisticParams
from .poisson_regression import PoissonRegression, PoissonRegressionParams
from .ridge import Ridge, RidgeParams
from .categorical_hmm import CategoricalHMM, CategoricalHMMParams
from .gaussian_hmm import GaussianHMM, GaussianHMMParams
from .hmm import HMM, Sequences
from .arhmm import ARHMM, ARHMMParams
from .neural_arhmm import NeuralARHMM, NeuralARHMMParams
from .poisson_hmm import PoissonHMM, PoissonHMMParams

__all__ = ["HMM", "Sequences", "PoissonHMM", "PoissonHMMParams", "GaussianHMM",
           "GaussianHMMParams", "CategoricalHMM", "CategoricalHMMParams",
           "ERM", "ERMData", "Ridge", "RidgeParams", "Logistic", "LogisticParams",
           "PoissonRegression", "PoissonRegressionParams", "ElasticNet", "ElasticNetOnSupport",
           "ElasticNetParams", "SupportChangeWarning"]
__all__ += ["ARHMM", "ARHMMParams", "NeuralARHMM", "NeuralARHMMParams"]
from .time_varying_poisson import TimeVaryingPoisson, TimeVaryingPoissonParams  # noqa: E402
__all__ += ["TimeVaryingPoisson", "TimeVaryingPoissonParams"]
