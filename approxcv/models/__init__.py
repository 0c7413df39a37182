"""Models: hyperparameters plus pure functions ``objective``, ``heldout`` and ``fit``.

One subpackage per family — :mod:`.hmm` (hidden Markov models and the time-varying
Poisson event model), :mod:`.erm` (regularised empirical risk minimisation), :mod:`.crf`
(conditional random fields) — on the one
protocol in :mod:`.base`; every public class is also available here as
``approxcv.models.<Name>``.
"""
from .crf import LinearChainCRF, LinearChainCRFParams
from .erm import (ERM, ERMData, ElasticNet, ElasticNetOnSupport, ElasticNetParams, Logistic,
                  LogisticParams, PoissonRegression, PoissonRegressionParams, Ridge, RidgeParams,
                  SupportChangeWarning)
from .hmm import (ARHMM, HMM, ARHMMParams, CategoricalHMM, CategoricalHMMParams, GaussianHMM,
                  GaussianHMMParams, NeuralARHMM, NeuralARHMMParams, PoissonHMM,
                  PoissonHMMParams, Sequences, TimeVaryingPoisson, TimeVaryingPoissonParams)

__all__ = ["HMM", "Sequences", "PoissonHMM", "PoissonHMMParams", "GaussianHMM",
           "GaussianHMMParams", "CategoricalHMM", "CategoricalHMMParams",
           "ARHMM", "ARHMMParams", "NeuralARHMM", "NeuralARHMMParams",
           "TimeVaryingPoisson", "TimeVaryingPoissonParams",
           "ERM", "ERMData", "Ridge", "RidgeParams", "Logistic", "LogisticParams",
           "PoissonRegression", "PoissonRegressionParams", "ElasticNet", "ElasticNetOnSupport",
           "ElasticNetParams", "SupportChangeWarning", "LinearChainCRF", "LinearChainCRFParams"]
