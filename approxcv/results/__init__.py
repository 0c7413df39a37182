"""Results: the result type of every cross-validation run (:class:`CVResult`), saving and
loading it (:mod:`~approxcv.results.storage`), ranking models (:func:`compare`) and the error
of an approximation against a reference (:func:`accuracy`); the record of what a run can
vouch for (:class:`Diagnostics`)."""
from .error_table import accuracy
from .inputs import check_comparable
from .ranking import compare
from .diagnostics import COMMON_FIELDS, Diagnostics
from .result import CVResult
from .storage import load_result, load_results, save_result

__all__ = ["CVResult", "Diagnostics", "COMMON_FIELDS", "compare", "accuracy",
           "check_comparable", "load_result", "load_results", "save_result"]
