"""approxcv in scikit-learn: estimators tuned by approximate leave-one-out, and approximate
CV scores of scikit-learn's own linear models (docs/sklearn.md).

``import approxcv.sklearn`` loads scikit-learn; ``import approxcv`` does not.
"""
from .ridge import RidgeALO
from .logistic import LogisticRegressionALO
from .poisson import PoissonRegressorALO
from .elastic_net import ElasticNetALO
from .score import ALOScore, alo_score
from .search import ALOSearchCV

__all__ = ["RidgeALO", "LogisticRegressionALO", "PoissonRegressorALO", "ElasticNetALO",
           "ALOScore", "alo_score", "ALOSearchCV"]
