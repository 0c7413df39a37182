"""Presenting results: the HTML report of a directory of saved results (``approxcv
report``, :mod:`~approxcv.report.page`; its sections in :mod:`~approxcv.report.sections`,
approximate results paired with exact ones in :mod:`~approxcv.report.exact`, HTML pieces in
:mod:`~approxcv.report.markup`) and the figures (:mod:`~approxcv.report.plot`, matplotlib).
Importing it imports matplotlib; its figures are drawn outside pyplot (no backend is
chosen, no figure is left open)."""
from . import plot
from .page import build_report, nothing_read, read_summary, report_html, report_path

__all__ = ["build_report", "report_html", "read_summary", "report_path", "nothing_read", "plot"]
