"""Regularised empirical risk minimisation (approximate leave-one-out paper).

:class:`ERM` (in :mod:`.base`) is the weighted objective ``sum_n w_n l(y_n, x_n' theta) +
penalty(theta)``; ridge, logistic and Poisson regression are generalised linear models on
it (:mod:`._glm`), the elastic net a smooth surrogate on the active set.
"""
from .base import ERM, ERMData
from .ridge import Ridge, RidgeParams
from .logistic import Logistic, LogisticParams
from .poisson_regression import PoissonRegression, PoissonRegressionParams
from .elastic_net import (ElasticNet, ElasticNetOnSupport, ElasticNetParams,
                          SupportChangeWarning)

__all__ = ["ERM", "ERMData", "Ridge", "RidgeParams", "Logistic", "LogisticParams",
           "PoissonRegression", "PoissonRegressionParams", "ElasticNet", "ElasticNetOnSupport",
           "ElasticNetParams", "SupportChangeWarning"]
