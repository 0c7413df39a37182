"""Stochastic composite likelihood for text chunking on CoNLL-2003 (seed §8.3, Figures 9-14).

Data: the chunk column of CoNLL-2003 (the loader of the CRF issue; the seed used CoNLL-2000,
which approxcv cannot read; both are WSJ/Reuters chunk tags in IOB form). Labels: the six
commonest chunk tags ``O, B-NP, I-NP, B-VP, I-VP, B-PP``, every other tag merged into
``OTHER`` (K = 7; the seed kept all 12). Training sets: 100 sentences drawn without
replacement from the train split (two samples for the CRF and the chain; the seed
resampled more); test: the whole test split.

* Boltzmann chain (tokens lower-cased; tokens seen fewer than ``MIN_COUNT`` times in the
  training sample are one ``UNK`` token; Gaussian prior ``sigma^2 = PRIOR_VAR``) with PL1/FL (PL1 always,
  weight 1 - beta; FL w.p. lambda, weight beta) and PL1/PL2 policies over a (lambda, beta)
  grid, on each training sample (its own vocabulary): test perplexity (exp of the per-token negative log-likelihood, full likelihood)
  against the expected FLOPs of the SCL and its gradient (Figure 9), and the beta
  heuristic (§7, Algorithm 1) against the grid-best beta by train perplexity (Figure 14).
* CRF (POS one-hot features and a bias) with FL, PL1, PL2 and PL1/FL mixtures: test
  negative log-likelihood per token against cost.
* ``select_policy`` by IJ on the Boltzmann chain grid, 5-fold CV over the training
  sentences (first resample): its choice against the test-best policy, and its time against
  exact CV on the same folds.

Usage: python benchmarks/scl_chunking.py [--quick]
"""
from __future__ import annotations

import collections
import time
import warnings

import numpy as np

import approxcv as acv
import approxcv.composite as scl
from approxcv.datasets.conll2003 import load_conll2003
from approxcv.models import LinearChainCRF

try:
    from _common import figure, run, run_stages, save_figure, write_results
except ImportError:                                   # run as a module from the repo root
    from benchmarks._common import figure, run, run_stages, save_figure, write_results

TAGS = ("O", "B-NP", "I-NP", "B-VP", "I-VP", "B-PP", "OTHER")
PRIOR_VAR = 10.0
#: BFGS steps of every fit (a chain with ~500 parameters takes ~350)
MAX_STEPS = 2000
#: tokens seen fewer times in a training sample are one UNK token (V ~ 60 for 100 sentences)
MIN_COUNT = 3
#: training samples of the chain grid and beta heuristic in the full run (the CRF: 2)
CHAIN_RESAMPLES = 2


def label_ids(chunks):
    return np.array([TAGS.index(c) if c in TAGS else len(TAGS) - 1 for c in chunks])


def vocabulary(train):
    counts = collections.Counter(w.lower() for s in train for w in s.words)
    words = sorted(w for w, c in counts.items() if c >= MIN_COUNT)
    return {w: i for i, w in enumerate(words)}            # UNK = len(words)


def chain_data(sents, vocab):
    unk = len(vocab)
    return [(np.array([vocab.get(w.lower(), unk) for w in s.words]), label_ids(s.chunk))
            for s in sents]


def crf_data(sents, pos_tags):
    out = []
    for s in sents:
        x = np.zeros((len(s.words), len(pos_tags) + 1))
        x[np.arange(len(s.words)), [pos_tags.get(p, len(pos_tags)) for p in s.pos]] = 1.0
        out.append((x, label_ids(s.chunk)))
    return out


def test_nll_per_token(base, theta, data, batch=400):
    """Per-token negative full log-likelihood of ``data``, in batches (one padding each)."""
    total, tokens = 0.0, 0
    for i in range(0, len(data), batch):
        part = data[i:i + batch]
        samples = base.prepare_samples(part)
        total -= float(np.sum(np.asarray(base.log_prob_samples(theta, samples))))
        tokens += sum(len(y) for _, y in part)
    return total / tokens


def policies_chain(bm, lams, betas):
    pl1, pl2, fl = (scl.pseudo_likelihood(bm, 1), scl.pseudo_likelihood(bm, 2),
                    scl.full_likelihood(bm))
    out = {}
    for fam, hi in (("PL1/FL", fl), ("PL1/PL2", pl2)):
        for lam in lams:
            for beta in betas:
                out[(fam, lam, beta)] = scl.Policy([pl1, hi], select=[1.0, lam],
                                                   weight=[1 - beta, beta])
    return out


def chain_experiment(train_sets, test, lams, betas, heuristic_lams):
    rows, heur = [], []
    for r, train in enumerate(train_sets):
        vocab = vocabulary(train)
        tr, te = chain_data(train, vocab), chain_data(test, vocab)
        bm = scl.BoltzmannChain(len(TAGS), len(vocab) + 1)
        for (fam, lam, beta), pol in policies_chain(bm, lams, betas).items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                f = scl.fit(bm, tr, pol, seed=r, prior_var=PRIOR_VAR, max_steps=MAX_STEPS)
            rows.append({"resample": r, "family": fam, "lambda": lam, "beta": beta,
                         "gflops": f.expected_cost / 1e9, "fit_seconds": f.seconds,
                         "converged": f.model.fit_result_["converged"],
                         "train_ppl": float(np.exp(test_nll_per_token(bm, f.theta, tr))),
                         "test_ppl": float(np.exp(test_nll_per_token(bm, f.theta, te)))})
        for fam in ("PL1/FL", "PL1/PL2"):
            for lam in heuristic_lams:
                pol = policies_chain(bm, [lam], [0.5])[(fam, lam, 0.5)]
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    f = scl.fit(bm, tr, pol, seed=r, prior_var=PRIOR_VAR, tune_beta=True,
                              max_steps=MAX_STEPS)
                grid = [x for x in rows if x["resample"] == r and x["family"] == fam
                        and x["lambda"] == lam]
                best = min(grid, key=lambda x: x["train_ppl"])
                heur.append({"resample": r, "family": fam, "lambda": lam,
                             "beta_heuristic": f.beta_history[-1][1],
                             "rounds": len(f.beta_history), "beta_grid_best": best["beta"],
                             "train_ppl_heuristic": float(np.exp(
                                 test_nll_per_token(bm, f.theta, tr))),
                             "test_ppl_heuristic": float(np.exp(
                                 test_nll_per_token(bm, f.theta, te))),
                             "train_ppl_grid_best": best["train_ppl"],
                             "test_ppl_grid_best": best["test_ppl"]})
    return rows, heur


def crf_experiment(train_sets, test, lams):
    pos = sorted({p for s in train_sets[0] for p in s.pos})
    pos_tags = {p: i for i, p in enumerate(pos)}
    rows = []
    for r, train in enumerate(train_sets):
        tr, te = crf_data(train, pos_tags), crf_data(test, pos_tags)
        comp = scl.CRFComponents(LinearChainCRF(len(TAGS)))
        comp.prepare_samples(tr)
        pl1, pl2, fl = (scl.pseudo_likelihood(comp, 1), scl.pseudo_likelihood(comp, 2),
                        scl.full_likelihood(comp))
        pols = {"FL": scl.Policy(fl), "PL1": scl.Policy(pl1), "PL2": scl.Policy(pl2)}
        for lam in lams:
            pols[f"PL1+{lam}FL"] = scl.Policy([pl1, fl], select=[1.0, lam], weight=[0.5, 0.5])
        for name, pol in pols.items():
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                f = scl.fit(comp, tr, pol, seed=r, prior_var=PRIOR_VAR, max_steps=MAX_STEPS)
            rows.append({"resample": r, "policy": name, "gflops": f.expected_cost / 1e9,
                         "fit_seconds": f.seconds,
                         "train_nll": test_nll_per_token(comp, f.theta, tr),
                         "test_nll": test_nll_per_token(comp, f.theta, te)})
    return rows


def selection_experiment(train, test, lams, betas, folds_k=5):
    vocab = vocabulary(train)
    tr, te = chain_data(train, vocab), chain_data(test, vocab)
    bm = scl.BoltzmannChain(len(TAGS), len(vocab) + 1)
    named = {f"{fam} lam={lam} beta={beta}": pol
             for (fam, lam, beta), pol in policies_chain(bm, lams, betas).items()}
    folds = acv.folds.kfold(len(tr), folds_k, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sel = scl.select_policy(bm, tr, named, folds, "ij", prior_var=PRIOR_VAR, check=True,
                                max_steps=MAX_STEPS)
    # the fits select_policy made (seed 0, the same prior and steps), not refitted
    test_ppl = {name: float(np.exp(test_nll_per_token(bm, params.theta, te)))
                for name, params in sel.params.items()}
    df = sel.table.reset_index().rename(columns={"model": "policy"})
    df["test_ppl"] = df["policy"].map(test_ppl)
    best = min(test_ppl, key=test_ppl.get)
    spearman = df[["elpd", "exact_elpd"]].rank().corr().iloc[0, 1]
    return {"table": df.to_dict("records"), "ij_choice": sel.best,
            "exact_choice": df.sort_values("exact_rank")["policy"].iloc[0],
            "test_best": best, "test_ppl_of_ij_choice": test_ppl[sel.best],
            "test_ppl_best": test_ppl[best],
            "ij_seconds": float(df["cv_seconds"].sum()),
            "exact_seconds": float(df["exact_seconds"].sum()),
            "exact_over_ij_time": float(df["exact_seconds"].sum() / df["cv_seconds"].sum()),
            "rank_correlation_ij_exact": float(spearman)}


def main(quick: bool):
    t0 = time.perf_counter()
    train_all, test = load_conll2003("train"), load_conll2003("test")
    reps = 1 if quick else 2
    chain_reps = 1 if quick else CHAIN_RESAMPLES
    rng = np.random.default_rng(0)
    train_sets = [[train_all[i] for i in rng.choice(len(train_all), 100, replace=False)]
                  for _ in range(max(reps, chain_reps))]
    if quick:
        test = test[:300]
    # the full run's grids are what fits the session's time on a shared 2-core machine
    lams = (0.3, 1.0) if quick else (0.1, 0.3, 1.0)            # select_policy's grid
    chain_lams = (0.3, 1.0) if quick else (0.1, 1.0)
    betas = (0.5,) if quick else (0.2, 0.5, 0.8)
    out = {"quick": quick, "labels": TAGS, "prior_var": PRIOR_VAR, "resamples": reps,
           "chain_resamples": chain_reps,
           "n_train": 100, "n_test": len(test), "stage_seconds": {}}
    run_stages("scl_chunking", quick, out, (
            (("chain", "beta_heuristic"), lambda: chain_experiment(train_sets[:chain_reps], test, chain_lams, betas,
                                               (0.3,) if quick else (0.1,))),
            ("crf", lambda: crf_experiment(train_sets[:reps], test, (0.3,) if quick else (0.1, 0.5))),
            ("selection", lambda: selection_experiment(train_sets[0], test, lams, (0.5,)))))
    out["seconds"] = time.perf_counter() - t0
    stem = write_results("scl_chunking", quick, out, plot)
    print(f"wrote {stem}.json/.png in {out['seconds']:.0f} s")
    return out


def plot(out, path):
    fig, axes = figure(1, 3, figsize=(16, 5))
    ax = axes[0]
    for i, fam in enumerate(("PL1/FL", "PL1/PL2")):
        for r_ in sorted({r["resample"] for r in out["chain"]}):   # one marker per sample
            rows = [r for r in out["chain"] if r["family"] == fam and r["resample"] == r_]
            ax.scatter([r["gflops"] for r in rows], [r["test_ppl"] for r in rows], s=14,
                       color=f"C{i}", marker="o^sDv"[r_ % 5], alpha=0.7,
                       label=f"{fam}, sample {r_ + 1}")
    ax.set_xscale("log")
    ax.set_xlabel("expected GFLOPs of the SCL and its gradient")
    ax.set_ylabel("test perplexity")
    ax.set_title("Boltzmann chain (Fig. 9)")
    ax.legend()
    ax = axes[1]
    h = out["beta_heuristic"]
    ax.scatter([r["test_ppl_heuristic"] for r in h], [r["test_ppl_grid_best"] for r in h],
               label="test perplexity")
    ax.scatter([r["train_ppl_heuristic"] for r in h], [r["train_ppl_grid_best"] for r in h],
               label="train perplexity")
    lo = min(min(r["train_ppl_heuristic"], r["train_ppl_grid_best"]) for r in h)
    hi = max(max(r["test_ppl_heuristic"], r["test_ppl_grid_best"]) for r in h)
    ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
    ax.set_xlabel("at the heuristic beta")
    ax.set_ylabel("at the grid-best beta (train perplexity)")
    ax.set_title("beta heuristic (Fig. 14)")
    ax.legend()
    ax = axes[2]
    for i, name in enumerate(sorted({r["policy"] for r in out["crf"]})):
        rows = [r for r in out["crf"] if r["policy"] == name]
        ax.scatter([r["gflops"] for r in rows], [r["test_nll"] for r in rows], s=20,
                   color=f"C{i}", label=name)
    ax.set_xscale("log")
    ax.set_xlabel("expected GFLOPs")
    ax.set_ylabel("test NLL per token")
    ax.set_title("CRF")
    ax.legend(fontsize=7)
    save_figure(fig, path, "SCL on CoNLL-2003 chunking")


if __name__ == "__main__":
    run(main, __doc__)
