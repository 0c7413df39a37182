"""``approxcv report``: one self-contained HTML page from a directory of saved results.

Every number comes from the results saved there (:meth:`CVResult.save`, written by
``approxcv demo``) and, if present, the demo's ``summary.json``; nothing is re-run. The page
has the results side by side, the model comparison (results on the same folds,
:func:`~approxcv.results.compare`), approximate against exact CV (an exact result
of the same model sharing folds with an approximate one, :func:`~approxcv.results.accuracy`),
the per-fold error estimates against the measured errors, timings, and the unreliable folds
with their causes. Figures are embedded PNGs; there is no script and no external file.

Results are set side by side only when their fingerprints (:attr:`CVResult.fingerprint`)
show the same data, level and units. Every file that could not be read (damaged, of another
format version, a ``.json`` and ``.npz`` that do not belong together) is listed with why,
under "Skipped files"; the page is written atomically (a temporary file renamed over it).
"""
from __future__ import annotations

import json
import warnings
from pathlib import Path

from ..errors import user_stacklevel
from .._version import __version__
from . import markup as H
from .exact import approx_exact_section, error_section, find_pairs
from .sections import (comparison_section, demo_section, results_section,
                               skipped_section, timing_section, unreliable_section)
from ..errors import InvalidArgumentError, ResultFileError, ResultFileWarning
from ..results.storage import SavedResult, Skipped, scan_results, write_atomic

__all__ = ["build_report", "report_html", "read_summary", "report_path", "nothing_read"]

NO_RESULTS = ("holds no saved results (NAME.json + NAME.npz written by CVResult.save or "
              "approxcv demo, there or in its results/ folder)")


def nothing_read(result_dir, skipped: list[Skipped]) -> str:
    """Why a directory gave no result: :data:`NO_RESULTS`, or every file skipped and why."""
    if not skipped:
        return f"{str(result_dir)!r} {NO_RESULTS}"
    return (f"no saved result in {str(result_dir)!r} could be read; skipped "
            + "; ".join(s.reason for s in skipped))


def report_html(saved: list[SavedResult], result_dir, summary: dict | None = None,
                skipped: list[Skipped] = ()) -> str:
    """The report of the results ``saved`` (and the demo's ``summary``) as one HTML page;
    ``skipped`` lists the files that could not be read, with why."""
    result_dir = Path(result_dir)
    pairs = find_pairs(saved)
    sections = [results_section(saved, result_dir), skipped_section(list(skipped)),
                comparison_section(saved),
                approx_exact_section(pairs), error_section(saved, pairs),
                timing_section(saved, pairs), unreliable_section(saved)]
    if summary is not None:
        sections.append(demo_section(summary))
    meta = (f"{len(saved)} saved result(s) in <code>{H.esc(result_dir)}</code>"
            + (" and its summary.json" if summary is not None else "")
            + (f"; <strong>{len(skipped)} file(s) skipped</strong> (see "
               '<a href="#skipped">Skipped files</a>)' if skipped else "")
            + f"; approxcv {H.esc(__version__)}. Every number is read from these files.")
    return H.page(f"approxcv report: {result_dir.resolve().name}", meta, sections)


def read_summary(result_dir) -> dict | None:
    """The demo's ``summary.json`` in ``result_dir``, or ``None`` where there is none.

    Raises:
        ResultFileError: it exists but is not a JSON object.
    """
    path = Path(result_dir) / "summary.json"
    if not path.is_file():
        return None
    try:
        summary = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ResultFileError(f"cannot read {str(path)!r}: {err}") from None
    if not isinstance(summary, dict):
        raise ResultFileError(f"{str(path)!r} is not a JSON object")
    return summary


def report_path(result_dir, out=None) -> Path:
    """Where the report goes: ``out`` (a directory gets a ``report.html`` in it), by
    default ``result_dir/report.html``."""
    out = Path(result_dir) / "report.html" if out is None else Path(out)
    return out / "report.html" if out.is_dir() else out


def build_report(result_dir, out=None, *, warn: bool = True) -> Path:
    """Write the HTML report of the results saved in ``result_dir`` (and its ``results/``
    folder) to :func:`report_path` ``(result_dir, out)``, atomically; return that path.
    Files that cannot be read are listed on the page and, with ``warn``, in a
    :class:`~approxcv.errors.ResultFileWarning`.

    Raises:
        InvalidArgumentError: ``result_dir`` is not a directory or holds no saved result
            that can be read (the message lists every skipped file and why).
        ResultFileError: ``summary.json`` there cannot be read.
        ResultWriteError: the report cannot be written (an earlier one is left intact).
    """
    result_dir = Path(result_dir)
    if not result_dir.is_dir():
        raise InvalidArgumentError(f"`result_dir` {str(result_dir)!r} is not a directory")
    saved, skipped = scan_results(result_dir)
    if not saved:
        raise InvalidArgumentError(f"`result_dir`: {nothing_read(result_dir, skipped)}")
    if skipped and warn:
        warnings.warn(f"the report of {str(result_dir)!r} skips {len(skipped)} file(s): "
                      + "; ".join(s.reason for s in skipped), ResultFileWarning, stacklevel=user_stacklevel())
    out = report_path(result_dir, out)
    write_atomic(out, report_html(saved, result_dir, read_summary(result_dir), skipped))
    return out
