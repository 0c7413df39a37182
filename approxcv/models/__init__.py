"""Models: hyperparameters plus pure functions ``objective``, ``heldout`` and ``fit``.

One subpackage per family — :mod:`.hmm` (hidden Markov models and the time-varying
Poisson event model), :mod:`.erm` (regularised empirical risk minimisation), :mod:`.crf`
(conditional random fields), :mod:`.mrf` (hidden Markov random fields), :mod:`.gp`
(Gaussian processes), and :mod:`.pointwise` (a model from a user's per-unit
log-likelihood) — on the one
protocol in :mod:`.base`; every public class is also available here as
``approxcv.models.<Name>``, and so is the protocol's base class ``Model`` (docs/own_model.md).
"""
import importlib as _importlib
import importlib.abc as _importlib_abc
import importlib.util as _importlib_util
import sys as _sys

#: the public names of each family subpackage, imported when first used (PEP 562): a user
#: of one family does not wait for the others' imports (a GP's brought SciPy's statistics)
_FAMILIES = {
    "hmm": ("HMM", "Sequences", "PoissonHMM", "PoissonHMMParams", "GaussianHMM",
            "GaussianHMMParams", "CategoricalHMM", "CategoricalHMMParams", "ARHMM",
            "ARHMMParams", "NeuralARHMM", "NeuralARHMMParams", "TimeVaryingPoisson",
            "TimeVaryingPoissonParams", "from_hmmlearn", "hmmlearn_data", "from_dynamax",
            "dynamax_data"),
    "erm": ("ERM", "ERMData", "Ridge", "RidgeParams", "Logistic", "LogisticParams",
            "PoissonRegression", "PoissonRegressionParams", "ElasticNet",
            "ElasticNetOnSupport", "ElasticNetParams", "SupportChangeWarning"),
    "crf": ("LinearChainCRF", "LinearChainCRFParams", "from_crfsuite", "crfsuite_data"),
    "mrf": ("HiddenPotts", "HiddenPottsParams", "HiddenPottsGaussianParams", "FieldData"),
    "gp": ("GP", "GPParams"),
    "pointwise": ("Pointwise",),
    "base": ("Model",),
}
_FAMILY_OF = {name: family for family, names in _FAMILIES.items() for name in names}


def __getattr__(name):
    if name in _FAMILY_OF:
        value = getattr(_importlib.import_module(f".{_FAMILY_OF[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(__all__))


__all__ = ["HMM", "Sequences", "PoissonHMM", "PoissonHMMParams", "GaussianHMM",
           "GaussianHMMParams", "CategoricalHMM", "CategoricalHMMParams",
           "ARHMM", "ARHMMParams", "NeuralARHMM", "NeuralARHMMParams",
           "TimeVaryingPoisson", "TimeVaryingPoissonParams", "from_hmmlearn", "hmmlearn_data",
           "from_dynamax", "dynamax_data",
           "ERM", "ERMData", "Ridge", "RidgeParams", "Logistic", "LogisticParams",
           "PoissonRegression", "PoissonRegressionParams", "ElasticNet", "ElasticNetOnSupport",
           "ElasticNetParams", "SupportChangeWarning", "LinearChainCRF", "LinearChainCRFParams",
           "from_crfsuite", "crfsuite_data",
           "HiddenPotts", "HiddenPottsParams", "HiddenPottsGaussianParams", "FieldData",
           "GP", "GPParams", "Pointwise", "Model"]

# Modules of the flat layout before the family subpackages (approxcv <= 0.1's
# ``approxcv.models.poisson_hmm`` etc.) stay importable under their old names, so older
# import paths and pickled parameters (NamedTuples record their module) keep working: an
# import of an old name gives the module under its new one, imported then.
_FLAT_LAYOUT = {"poisson_hmm": "hmm.poisson_hmm", "gaussian_hmm": "hmm.gaussian_hmm",
                "categorical_hmm": "hmm.categorical_hmm", "arhmm": "hmm.arhmm",
                "neural_arhmm": "hmm.neural_arhmm",
                "time_varying_poisson": "hmm.time_varying_poisson", "_hmm_em": "hmm.em",
                "_occupancy": "hmm._occupancy", "_data_scale": "hmm._data_scale",
                "_delaporte": "hmm._delaporte", "ridge": "erm.ridge", "logistic": "erm.logistic",
                "poisson_regression": "erm.poisson_regression", "elastic_net": "erm.elastic_net",
                "elastic_net_support": "erm.elastic_net_support", "_glm": "erm._glm"}


class _FlatLayoutFinder(_importlib_abc.MetaPathFinder, _importlib_abc.Loader):
    """Finds ``approxcv.models.<old name>`` (:data:`_FLAT_LAYOUT`) and loads it as the
    module of its new name."""

    def find_spec(self, fullname, path=None, target=None):
        package, _, old = fullname.rpartition(".")
        if package == __name__ and old in _FLAT_LAYOUT:
            return _importlib_util.spec_from_loader(fullname, self)
        return None

    def create_module(self, spec):
        new = _FLAT_LAYOUT[spec.name.rpartition(".")[2]]
        return _importlib.import_module(f"{__name__}.{new}")

    def exec_module(self, module):
        pass            # imported under its new name already


if not any(isinstance(f, _FlatLayoutFinder) for f in _sys.meta_path):
    _sys.meta_path.append(_FlatLayoutFinder())
