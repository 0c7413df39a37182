"""The report's sections that read each result alone or side by side: the results table,
the demo's summary, the model comparison, timings and unreliable folds."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from . import markup as H
from . import plot
from .exact import MAX_ROWS, compared, data_digest, model_name, result_name
from ..engine.fingerprint import folds_digest
from ..results import compare
from ..results.storage import SavedResult, Skipped

MAX_IDS = 15        # fold ids listed per cause


def _inputs_key(s: SavedResult) -> tuple:
    """What ``s`` was computed on: equal keys, the same data, level, units and folds."""
    return data_digest(s), s.result.level, folds_digest(s.result.folds)


def skipped_section(skipped: list[Skipped]) -> tuple:
    """``(anchor, title, body)``: every file of the directory not read as a result, and
    why."""
    if not skipped:
        return "skipped", "Skipped files", H.note("Every file here was read; none skipped.")
    rows = pd.DataFrame({"file": [str(s.path) for s in skipped],
                         "why it was skipped": [s.reason for s in skipped]})
    return "skipped", "Skipped files", (
        H.table(rows, index=False)
        + H.note(f"{len(skipped)} file(s) could not be read as saved results: nothing on "
                 "this page comes from them. Save those results again to include them."))


def results_section(saved, result_dir: Path) -> tuple:
    """``(anchor, title, body)``: one row per result: what it is, the fold set it was
    computed on (results with the same letter share data, level and folds), its means and
    headline diagnostics. No column ranks the rows: means over different fold sets, or over
    each result's own reliable folds, are not comparable (the model comparison ranks results
    on the same folds only)."""
    sets: dict[tuple, str] = {}
    rows = []
    for s in saved:
        r, summ = s.result, s.result.summary()
        d = r.diagnostics
        key = _inputs_key(s)
        fold_set = sets.setdefault(key, _fold_set_name(len(sets)))
        rows.append({"result": s.label, "method": r.method, "model": model_name(s),
                     "scheme": r.scheme or "–", "level": r.level, "fold set": fold_set,
                     "folds": len(r),
                     "units left out": int(sum(len(p) for p in r.point_loss))
                     if not getattr(r.folds, "partial", False) else int(np.sum(r.folds.sizes)),
                     **({"units scored": int(sum(len(p) for p in r.point_loss))}
                        if getattr(r.folds, "partial", False) else {}),
                     "unreliable folds": len(r) - summ["n_reliable"],
                     "mean fold loss": summ["mean_fold_loss"],
                     "mean point loss": summ["mean_point_loss"],
                     "grad norm": d.get("grad_norm", np.nan),
                     "Hessian min eig": d.get("hessian_min_eig", np.nan),
                     "jitter": d.get("jitter", np.nan)})
    shared = len(sets) == 1 and len(saved) > 1
    body = (H.table(pd.DataFrame(rows), index=False)
            + H.note("Losses are -log p(x_o | x_kept) of the left-out units: lower is better. "
                     + ("Every result here is on the same data, level and folds (fold set "
                        "A). " if shared else
                        f"The results are on {len(sets)} different fold sets (data, level and "
                        "folds; the letter in 'fold set'): means of rows with different "
                        "letters are over different folds and are not comparable — an "
                        "exact run on 10 folds beside an approximate one on 1,000 is a check "
                        "of those 10 folds, not a ranking. ")
                     + "The means are over all folds, unreliable ones included (see "
                     "'Unreliable folds'); to rank results, see 'Model comparison'. "
                     f"Read from {len(saved)} result(s) saved in {result_dir}."))
    return "results", "Results", body


def _fold_set_name(i: int) -> str:
    """``A``, ``B``, ..., ``Z``, ``AA``, ...: the name of the ``i``-th fold set."""
    name = ""
    i += 1
    while i:
        i, rem = divmod(i - 1, 26)
        name = chr(65 + rem) + name
    return name


def _flatten(d: dict, prefix: str = ""):
    """``(dotted key, value)`` for the scalars and short lists of a nested dict."""
    for k, v in d.items():
        key = f"{prefix}{k}"
        if isinstance(v, dict):
            yield from _flatten(v, key + ".")
        elif isinstance(v, list):
            yield key, (", ".join(H.number(x) for x in v) if len(v) <= 12
                        else f"list of {len(v)} values")
        else:
            yield key, v


def demo_section(summary: dict) -> tuple:
    """``(anchor, title, body)``: the demo's ``summary.json``, flattened."""
    body = (H.key_values(_flatten(summary))
            + H.note("The demo's summary.json as written by approxcv demo (times in "
                     "seconds)."))
    return "demo", "Demo summary", body


def comparison_section(saved) -> tuple:
    """``(anchor, title, body)``: :func:`compare` of every group of two or more
    results computed on the same inputs (data, level, units and folds, by fingerprint), or
    why there is none. Results without a fingerprint of their data are not ranked."""
    groups: dict[tuple, list] = {}
    for s in saved:
        groups.setdefault(_inputs_key(s), []).append(s)
    unknown = [s.label for s in saved if data_digest(s) is None]
    parts = []
    if unknown:
        parts.append(H.note(
            f"Not ranked: {', '.join(unknown)} carry no fingerprint of their data (saved by "
            "an older approxcv, or built by hand), so nothing shows that they were computed "
            "on the same data as another result."))
    for key, members in groups.items():
        if key[0] is None or len(members) < 2:
            continue
        table = compare({s.label: s.result for s in members})
        models = {s.label: model_name(s) for s in members}
        table.insert(len(table.columns), "model", [models[i] for i in table.index])
        per = ("unit, summed" if table.attrs["unit"] == "point"
               else "fold, averaged over folds")
        parts.append(
            f"<h3>{len(members)} results on the same {table.attrs['n_folds']} folds</h3>"
            + H.table(table)
            + H.note(f"elpd = -loss per left-out {per}; "
                     "se its standard error, dse the paired standard error of the difference "
                     "to the best (rank 0); 'warning' marks a row resting on unreliable "
                     "folds or on other unreliable folds than the best's.")
            + H.figure(plot.compare(table).figure, "Model comparison: dots ± se, triangles: "
                       "difference to the best ± dse.", "model comparison plot"))
    if not any(p.startswith("<h3>") for p in parts):
        parts.append(H.note(
            "No two results here were computed on the same data, level and folds, so there "
            "is no model comparison. "
            "Save results of several models (or methods) on the same folds into this "
            "directory (res.save(DIR / 'K=3', model=model)) to rank them."))
    return "comparison", "Model comparison", "\n".join(parts)


def timing_section(saved, pairs) -> tuple:
    """``(anchor, title, body)``: seconds of every result by stage, and timing bars
    (with the exact time extrapolated to an approximate result's folds, labelled so)."""
    stages = sorted({k for s in saved for k in s.result.stage_seconds})
    rows = []
    for s in saved:
        r = s.result
        rows.append({"result": s.label, "method": r.method, "folds": len(r),
                     "seconds": r.seconds, "per fold": r.seconds / len(r),
                     "fit": np.nan if r.fit_seconds is None else r.fit_seconds,
                     **{f"stage: {k}": r.stage_seconds.get(k, np.nan) for k in stages}})
    bars = {result_name(s): s.result.seconds for s in saved}
    n_folds = {result_name(s): len(s.result) for s in saved}
    for p in compared(pairs):
        n_a, e = len(p.approx.result), p.exact.result
        if n_a > len(e):
            label = f"{p.exact.label}, extrapolated"
            bars[label], n_folds[label] = e.seconds / len(e) * n_a, n_a
    fig = plot.timing_bars(bars, n_folds, title="time after the fit").figure
    body = (H.table(pd.DataFrame(rows), index=False)
            + H.note("Wall seconds after the full-data fit ('fit': the fit, where "
                     "cross_validate ran it); stages as recorded by each method. An "
                     "extrapolated bar is the measured exact time per fold times the "
                     "approximate result's number of folds.")
            + H.figure(fig, "Time of each saved run, with the folds it covered and its time "
                       "per fold.", "timing bars"))
    return "timings", "Timings", body


def _unreliable_of(s: SavedResult) -> str:
    """One result's unreliable folds: counts by cause, and the folds with their causes."""
    r = s.result
    causes = r.diagnostics.unreliable_causes
    bad_ids = r.fold_ids[r.unreliable]
    head = (f"<h3>{H.esc(result_name(s))}: {len(bad_ids)} of {len(r)} folds unreliable</h3>")
    if not len(bad_ids):
        return head
    rows = []
    for cause, ids in causes.items():
        ids = np.asarray(ids).tolist()
        shown = ", ".join(map(str, ids[:MAX_IDS])) + (
            f" … ({len(ids) - MAX_IDS} more)" if len(ids) > MAX_IDS else "")
        rows.append((cause, len(ids), shown))
    members = {c: set(np.asarray(ids).tolist()) for c, ids in causes.items()}
    why = {i: [c for c, ids in members.items() if i in ids] for i in bad_ids.tolist()}
    per_fold = pd.DataFrame({"fold_id": bad_ids, "fold_loss": r.fold_loss[r.unreliable],
                             "causes": [", ".join(why[i]) or "–" for i in bad_ids.tolist()]})
    if r.error_estimate is not None:
        per_fold["error_estimate"] = np.asarray(r.error_estimate)[r.unreliable]
    return (head + H.table(pd.DataFrame(rows, columns=["cause", "folds", "fold ids"]),
                           index=False)
            + H.table(per_fold.head(MAX_ROWS), index=False)
            + (H.note(f"First {MAX_ROWS} of {len(per_fold)} unreliable folds.")
               if len(per_fold) > MAX_ROWS else ""))


def unreliable_section(saved) -> tuple:
    """``(anchor, title, body)``: the unreliable folds of every result."""
    intro = H.note("Folds a method cannot vouch for (diagnostics['unreliable_folds']), by "
                   "cause (diagnostics['unreliable_causes']): an estimated error above tol, a "
                   "Hessian not positive definite, an unconverged solve or refit, a "
                   "non-finite loss, ... They are counted beside the means, never dropped "
                   "silently.")
    return "unreliable", "Unreliable folds", intro + "\n".join(_unreliable_of(s) for s in saved)
