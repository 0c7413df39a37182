"""``approxcv report``: one self-contained HTML page from a directory of saved results.

Every number comes from the results saved there (:meth:`CVResult.save`, written by
``approxcv demo``) and, if present, the demo's ``summary.json``; nothing is re-run. The page
has the results side by side, the model comparison (results on the same folds,
:func:`~approxcv.results.compare_models`), approximate against exact CV (an exact result
of the same model sharing folds with an approximate one, :func:`~approxcv.results.compare`),
the per-fold error estimates against the measured errors, timings, and the unreliable folds
with their causes. Figures are embedded PNGs; there is no script and no external file.
"""
from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pandas as pd

from . import _html as H
from .errors import InvalidArgumentError, ResultFileError
from .results import compare, compare_models
from .results_io import SavedResult, saved_results

__all__ = ["build_report", "report_html", "read_summary", "report_path"]

MAX_ROWS = 50       # rows of a per-fold table before it is cut (the note says how many)
MAX_IDS = 15        # fold ids listed per cause
NO_RESULTS = ("holds no saved results (NAME.json + NAME.npz written by CVResult.save or "
              "approxcv demo, there or in its results/ folder)")


class Pair(NamedTuple):
    """An approximate result and an exact one of the same model sharing folds, with their
    :func:`compare` table (``None`` and ``problem`` set if they cannot be compared)."""
    approx: SavedResult
    exact: SavedResult
    table: pd.DataFrame | None
    problem: str | None


def _model(s: SavedResult) -> str:
    return s.model or "–"


def _name(s: SavedResult) -> str:
    return f"{s.label} ({s.result.method})"


def _fold_key(result) -> str:
    """A digest of the folds (ids and left-out units): equal keys, the same folds."""
    h = hashlib.sha256()
    f = result.folds
    for arr in (np.asarray([f.n]), f.ids, f.sizes,
                np.concatenate([np.asarray(f[i]) for i in range(len(f))])):
        h.update(np.ascontiguousarray(arr, dtype=np.int64).tobytes())
    return h.hexdigest()


def find_pairs(saved: list[SavedResult]) -> list[Pair]:
    """Every (approximate, exact) pair with the same model, scheme and level and at least
    one fold id in common."""
    pairs = []
    for e in (s for s in saved if s.result.method == "exact"):
        for a in (s for s in saved if s.result.method != "exact"):
            same = (a.model == e.model and a.result.scheme == e.result.scheme
                    and a.result.level == e.result.level)
            if not same or not np.intersect1d(a.result.fold_ids, e.result.fold_ids).size:
                continue
            try:
                pairs.append(Pair(a, e, compare(a.result, e.result), None))
            except InvalidArgumentError as err:
                pairs.append(Pair(a, e, None, str(err)))
    return pairs


def _results_section(saved, result_dir: Path) -> tuple:
    rows = []
    for s in saved:
        r, summ = s.result, s.result.summary()
        d = r.diagnostics
        rows.append({"result": s.label, "method": r.method, "model": _model(s),
                     "scheme": r.scheme or "–", "level": r.level, "folds": len(r),
                     "units left out": int(sum(len(p) for p in r.point_loss)),
                     "reliable folds": summ["n_reliable"],
                     "mean fold loss": summ["mean_fold_loss"],
                     "mean fold loss, reliable": summ["mean_fold_loss_reliable"],
                     "mean point loss": summ["mean_point_loss"],
                     "grad norm": d.get("grad_norm", np.nan),
                     "Hessian min eig": d.get("hessian_min_eig", np.nan),
                     "jitter": d.get("jitter", np.nan)})
    body = (H.table(pd.DataFrame(rows), index=False)
            + H.note("Losses are -log p(x_o | x_kept) of the left-out units: lower is better. "
                     "'reliable' folds are those the method vouches for (see 'Unreliable "
                     f"folds'). Read from {len(saved)} result(s) saved in {result_dir}."))
    return "results", "Results", body


def _flatten(d: dict, prefix: str = ""):
    """``(dotted key, value)`` for the scalars and short lists of a nested dict."""
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            yield from _flatten(v, key + ".")
        elif isinstance(v, list):
            yield key, (json.dumps(v) if len(v) <= 12 else f"list of {len(v)} values")
        else:
            yield key, v


def _demo_section(summary: dict) -> tuple:
    body = (H.key_values(_flatten(summary))
            + H.note("The demo's summary.json as written by approxcv demo (times in "
                     "seconds)."))
    return "demo", "Demo summary", body


def _comparison_section(saved) -> tuple:
    from . import plot
    groups: dict[str, list] = {}
    for s in saved:
        groups.setdefault(_fold_key(s.result), []).append(s)
    parts = []
    for members in (g for g in groups.values() if len(g) >= 2):
        table = compare_models({s.label: s.result for s in members})
        table.insert(len(table.columns), "model",
                     [_model(next(s for s in members if s.label == i)) for i in table.index])
        unit = table.attrs["unit"]
        parts.append(
            f"<h3>{len(members)} results on the same {table.attrs['n_folds']} folds</h3>"
            + H.table(table)
            + H.note(f"elpd = -loss per left-out {'unit, summed' if unit == 'point' else 'fold, averaged over folds'}; "
                     "se its standard error, dse the paired standard error of the difference "
                     "to the best (rank 0); 'warning' marks a row resting on unreliable "
                     "folds or on other unreliable folds than the best's.")
            + H.figure(plot.compare(table).figure, "Model comparison: dots ± se, triangles: "
                       "difference to the best ± dse.", "model comparison plot"))
    if not parts:
        parts.append(H.note(
            "No two results here hold the same folds, so there is no model comparison. "
            "Save results of several models (or methods) on the same folds into this "
            "directory (res.save(DIR / 'K=3', model=model)) to rank them."))
    return "comparison", "Model comparison", "\n".join(parts)


def _pair_summary(p: Pair) -> str:
    df, a, e = p.table, p.approx.result, p.exact.result
    folds = df[df.kind == "fold"]
    good = folds[~folds.unreliable]
    rows = [("folds compared (shared fold ids)", len(folds)),
            ("of them unreliable in either result (left out below)", int(folds.unreliable.sum())),
            ("mean relative error, per point", df.attrs["mean_rel_error_point"]),
            ("mean relative error, per fold", df.attrs["mean_rel_error_fold"]),
            ("largest relative error, per fold",
             float(good.rel_error.max()) if len(good) else np.nan),
            ("time per fold, approximate [s]", a.seconds / len(a)),
            ("time per fold, exact [s]", e.seconds / len(e)),
            ("speed-up per fold", (e.seconds / len(e)) / (a.seconds / len(a))
             if a.seconds > 0 else np.nan)]
    return H.key_values(rows)


def _pair_figures(p: Pair) -> str:
    from .plot import scatter
    import matplotlib.pyplot as plt
    figs = []
    for kind in ("point", "fold"):
        fig, ax = plt.subplots(figsize=(4.6, 4.4))
        err = p.table.attrs[f"mean_rel_error_{kind}"]
        scatter(p.approx.result, p.exact.result, kind=kind, ax=ax,
                title=f"per {kind}: mean rel. error {err:.2e} (reliable folds)")
        figs.append(H.figure(fig, f"{p.approx.result.method.upper()} against exact CV, per "
                             f"{kind}, on the shared folds; dashed: x = y.",
                             f"scatter per {kind}"))
    return f'<div class="figs">{"".join(figs)}</div>'


def _approx_exact_section(pairs: list[Pair]) -> tuple:
    parts = []
    for p in pairs:
        head = (f"<h3>{H.esc(_name(p.approx))} against {H.esc(_name(p.exact))}, model "
                f"{H.esc(_model(p.approx))}</h3>")
        if p.table is None:
            parts.append(head + H.note(f"Not compared: {p.problem}"))
            continue
        folds = p.table[p.table.kind == "fold"]
        cols = ["fold_id", "approx", "exact", "abs_error", "rel_error", "unreliable"]
        parts.append(head + _pair_summary(p) + _pair_figures(p)
                     + H.table(folds[cols].head(MAX_ROWS), index=False)
                     + H.note(f"Fold losses of the {len(folds)} shared folds"
                              + (f" (first {MAX_ROWS})" if len(folds) > MAX_ROWS else "")
                              + "; all rows are in compare(approx, exact)."))
    if not parts:
        parts.append(H.note("No exact result here shares folds with an approximate result "
                            "of the same model, so there is no comparison with exact CV."))
    return "exact", "Approximate against exact CV", "\n".join(parts)


def _estimate_figure(s: SavedResult, est: np.ndarray, tol: float) -> str:
    import matplotlib.pyplot as plt
    pos = est[np.isfinite(est) & (est > 0)]
    fig, ax = plt.subplots(figsize=(5, 3.4))
    if pos.size:
        ax.hist(np.log10(pos), bins=30, color="tab:blue", alpha=0.8)
    if tol > 0:
        ax.axvline(np.log10(tol), color="tab:red", ls="--", label=f"tol = {tol:g}")
        ax.legend()
    ax.set_xlabel("log10 estimated relative error of the fold loss")
    ax.set_ylabel("folds")
    ax.set_title(f"{s.label}: error estimates of {len(est)} folds")
    other = len(est) - pos.size
    return H.figure(fig, f"Estimated relative error of every fold of {s.label}"
                    + (f" ({other} fold(s) with an estimate of zero or not finite not drawn)"
                       if other else "") + "; folds right of the red line are unreliable.",
                    "histogram of error estimates")


def _measured_figure(p: Pair, table: pd.DataFrame) -> str:
    import matplotlib.pyplot as plt
    finite = np.isfinite(table.error_estimate) & np.isfinite(table.rel_error)
    ok = table[finite & (table.error_estimate > 0) & (table.rel_error > 0)]
    fig, ax = plt.subplots(figsize=(4.6, 4.4))
    ax.loglog(ok.rel_error, ok.error_estimate, "o", ms=5, alpha=0.8)
    if len(ok):
        lo = float(min(ok.rel_error.min(), ok.error_estimate.min()))
        hi = float(max(ok.rel_error.max(), ok.error_estimate.max()))
        ax.plot([lo, hi], [lo, hi], "k--", lw=1, label="x = y")
        ax.legend(loc="upper left")
    ax.set_xlabel(f"measured relative error (exact: {p.exact.label})")
    ax.set_ylabel("estimated relative error")
    ax.set_title(f"{p.approx.label}: estimated vs measured")
    dropped = len(table) - len(ok)
    return H.figure(fig, "Each dot a fold refitted exactly: the estimate against the error "
                    "measured by the refit" + (f" ({dropped} fold(s) with a zero or non-finite "
                                               "error not drawn)" if dropped else "")
                    + ".", "estimated against measured errors")


def _estimates_of(s: SavedResult, pairs: list[Pair]) -> str:
    est = np.asarray(s.result.error_estimate, float)
    tol = float(s.result.diagnostics.get("tol", np.nan))
    finite = est[np.isfinite(est)]
    stat = (lambda f: float(f(finite)) if finite.size else np.nan)
    rows = [("folds", len(est)), ("tol", tol),
            ("folds above tol (or not finite)", int(np.sum(~(est <= tol)))),
            ("folds whose estimate is not finite", int(len(est) - finite.size)),
            ("mean of the finite estimates", stat(np.mean)),
            ("median of the finite estimates", stat(np.median)),
            ("largest finite estimate", stat(np.max))]
    parts = [f"<h3>{H.esc(_name(s))}</h3>", H.key_values(rows)]
    figs = [_estimate_figure(s, est, tol)]
    by_id = pd.Series(est, index=s.result.fold_ids)
    for p in (p for p in pairs if p.approx is s and p.table is not None):
        folds = p.table[p.table.kind == "fold"][["fold_id", "rel_error", "unreliable"]]
        folds = folds.assign(error_estimate=by_id.reindex(folds.fold_id).to_numpy())
        figs.append(_measured_figure(p, folds))
        parts.append(H.note(f"Against the exact refits of {p.exact.label}: the estimate of "
                            "each shared fold beside its measured relative error."))
        parts.append(H.table(folds.rename(columns={"rel_error": "measured"}).head(MAX_ROWS),
                             index=False))
    parts.insert(2, f'<div class="figs">{"".join(figs)}</div>')
    return "\n".join(parts)


def _error_section(saved, pairs) -> tuple:
    with_est = [s for s in saved if s.result.error_estimate is not None]
    parts = [_estimates_of(s, pairs) for s in with_est] or [H.note(
        "No result here carries per-fold error estimates (the IJ and NS methods do).")]
    intro = H.note("The error estimate of a fold is its estimated relative error of the fold "
                   "loss against an exact refit (from two chord steps at the method's point); "
                   "where exact refits of the same folds are saved, it is shown against the "
                   "measured error.")
    return "errors", "Error estimates", intro + "\n".join(parts)


def _timing_section(saved, pairs) -> tuple:
    from .plot import timing_bars
    import matplotlib.pyplot as plt
    stages = sorted({k for s in saved for k in s.result.stage_seconds})
    rows = []
    for s in saved:
        r = s.result
        rows.append({"result": s.label, "method": r.method, "folds": len(r),
                     "seconds": r.seconds, "per fold": r.seconds / len(r),
                     "fit": np.nan if r.fit_seconds is None else r.fit_seconds,
                     **{f"stage: {k}": r.stage_seconds.get(k, np.nan) for k in stages}})
    bars = {_name(s): s.result.seconds for s in saved}
    for p in pairs:
        n_a, e = len(p.approx.result), p.exact.result
        if n_a > len(e):
            bars[f"{p.exact.label}, extrapolated to {n_a} folds"] = e.seconds / len(e) * n_a
    fig, ax = plt.subplots(figsize=(7, 3.8))
    timing_bars(bars, ax=ax, title="time after the fit")
    ax.tick_params(axis="x", labelrotation=15)
    body = (H.table(pd.DataFrame(rows), index=False)
            + H.note("Wall seconds after the full-data fit ('fit': the fit, where "
                     "cross_validate ran it); stages as recorded by each method. An "
                     "extrapolated bar is the measured exact time per fold times the "
                     "approximate result's number of folds.")
            + H.figure(fig, "Time of each saved run (log scale).", "timing bars"))
    return "timings", "Timings", body


def _unreliable_of(s: SavedResult) -> str:
    r = s.result
    causes = r.diagnostics.get("unreliable_causes", {})
    bad_ids = r.fold_ids[r.unreliable]
    head = (f"<h3>{H.esc(_name(s))}: {len(bad_ids)} of {len(r)} folds unreliable</h3>")
    if not len(bad_ids):
        return head
    rows = []
    for cause, ids in causes.items():
        ids = np.asarray(ids).tolist()
        shown = ", ".join(map(str, ids[:MAX_IDS])) + (
            f" … ({len(ids) - MAX_IDS} more)" if len(ids) > MAX_IDS else "")
        rows.append((cause, len(ids), shown))
    why = {i: [c for c, ids in causes.items() if i in set(np.asarray(ids).tolist())]
           for i in bad_ids.tolist()}
    per_fold = pd.DataFrame({"fold_id": bad_ids, "fold_loss": r.fold_loss[r.unreliable],
                             "causes": [", ".join(why[i]) or "–" for i in bad_ids.tolist()]})
    if r.error_estimate is not None:
        per_fold["error_estimate"] = np.asarray(r.error_estimate)[r.unreliable]
    return (head + H.table(pd.DataFrame(rows, columns=["cause", "folds", "fold ids"]),
                           index=False)
            + H.table(per_fold.head(MAX_ROWS), index=False)
            + (H.note(f"First {MAX_ROWS} of {len(per_fold)} unreliable folds.")
               if len(per_fold) > MAX_ROWS else ""))


def _unreliable_section(saved) -> tuple:
    intro = H.note("Folds a method cannot vouch for (diagnostics['unreliable_folds']), by "
                   "cause (diagnostics['unreliable_causes']): an estimated error above tol, a "
                   "Hessian not positive definite, an unconverged solve or refit, a "
                   "non-finite loss, ... They are counted beside the means, never dropped "
                   "silently.")
    return "unreliable", "Unreliable folds", intro + "\n".join(_unreliable_of(s) for s in saved)


def report_html(saved: list[SavedResult], result_dir, summary: dict | None = None) -> str:
    """The report of the results ``saved`` (and the demo's ``summary``) as one HTML page."""
    from . import __version__
    result_dir = Path(result_dir)
    pairs = find_pairs(saved)
    sections = [_results_section(saved, result_dir)]
    if summary is not None:
        sections.append(_demo_section(summary))
    sections += [_comparison_section(saved), _approx_exact_section(pairs),
                 _error_section(saved, pairs), _timing_section(saved, pairs),
                 _unreliable_section(saved)]
    meta = (f"{len(saved)} saved result(s) in <code>{H.esc(result_dir)}</code>"
            + (" and its summary.json" if summary is not None else "")
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


def build_report(result_dir, out=None) -> Path:
    """Write the HTML report of the results saved in ``result_dir`` (and its ``results/``
    folder) to :func:`report_path` ``(result_dir, out)``; return that path.

    Raises:
        InvalidArgumentError: ``result_dir`` is not a directory or holds no saved result.
        ResultFileError: a saved result there (or ``summary.json``) cannot be read.
    """
    result_dir = Path(result_dir)
    if not result_dir.is_dir():
        raise InvalidArgumentError(f"`result_dir` {str(result_dir)!r} is not a directory")
    saved = saved_results(result_dir)
    if not saved:
        raise InvalidArgumentError(f"`result_dir` {str(result_dir)!r} {NO_RESULTS}")
    out = report_path(result_dir, out)
    out.write_text(report_html(saved, result_dir, read_summary(result_dir)), encoding="utf-8")
    return out
