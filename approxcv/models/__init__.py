"""Models: hyperparameters plus pure functions ``objective``, ``heldout`` and ``fit``.

One subpackage per family — :mod:`.hmm` (hidden Markov models and the time-varying
Poisson event model), :mod:`.erm` (regularised empirical risk minimisation), :mod:`.crf`
(conditional random fields), :mod:`.mrf` (hidden Markov random fields), :mod:`.gp`
(Gaussian processes) — on the one
protocol in :mod:`.base`; every public class is also available here as
``approxcv.models.<Name>``.
"""
from .crf import LinearChainCRF, LinearChainCRFParams
from .gp import GP, GPParams
from .erm import (ERM, ERMData, ElasticNet, ElasticNetOnSupport, ElasticNetParams, Logistic,
                  LogisticParams, PoissonRegression, PoissonRegressionParams, Ridge, RidgeParams,
                  SupportChangeWarning)
from .mrf import FieldData, HiddenPotts, HiddenPottsGaussianParams, HiddenPottsParams
from .hmm import (ARHMM, HMM, ARHMMParams, CategoricalHMM, CategoricalHMMParams, GaussianHMM,
                  GaussianHMMParams, NeuralARHMM, NeuralARHMMParams, PoissonHMM,
                  PoissonHMMParams, Sequences, TimeVaryingPoisson, TimeVaryingPoissonParams)

__all__ = ["HMM", "Sequences", "PoissonHMM", "PoissonHMMParams", "GaussianHMM",
           "GaussianHMMParams", "CategoricalHMM", "CategoricalHMMParams",
           "ARHMM", "ARHMMParams", "NeuralARHMM", "NeuralARHMMParams",
           "TimeVaryingPoisson", "TimeVaryingPoissonParams",
           "ERM", "ERMData", "Ridge", "RidgeParams", "Logistic", "LogisticParams",
           "PoissonRegression", "PoissonRegressionParams", "ElasticNet", "ElasticNetOnSupport",
           "ElasticNetParams", "SupportChangeWarning", "LinearChainCRF", "LinearChainCRFParams",
           "HiddenPotts", "HiddenPottsParams", "HiddenPottsGaussianParams", "FieldData",
           "GP", "GPParams"]

# Modules of the flat layout before the family subpackages (approxcv <= 0.1's
# ``approxcv.models.poisson_hmm`` etc.) stay importable under their old names, so older
# import paths and pickled parameters (NamedTuples record their module) keep working.
import importlib as _importlib  # noqa: E402
import sys as _sys  # noqa: E402

_FLAT_LAYOUT = {"poisson_hmm": "hmm.poisson_hmm", "gaussian_hmm": "hmm.gaussian_hmm",
                "categorical_hmm": "hmm.categorical_hmm", "arhmm": "hmm.arhmm",
                "neural_arhmm": "hmm.neural_arhmm",
                "time_varying_poisson": "hmm.time_varying_poisson", "_hmm_em": "hmm.em",
                "_occupancy": "hmm._occupancy", "_data_scale": "hmm._data_scale",
                "_delaporte": "hmm._delaporte", "ridge": "erm.ridge", "logistic": "erm.logistic",
                "poisson_regression": "erm.poisson_regression", "elastic_net": "erm.elastic_net",
                "elastic_net_support": "erm.elastic_net_support", "_glm": "erm._glm"}
for _old, _new in _FLAT_LAYOUT.items():
    _sys.modules[f"{__name__}.{_old}"] = _importlib.import_module(f"{__name__}.{_new}")
