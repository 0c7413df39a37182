"""docs/own_model.md's structured example (a Student-t HMM written on
``approxcv.inference.chain``), run from the page's own code: its held-out loss and objective
against enumeration of every latent path, and its IJ against exact refits."""
import itertools
from pathlib import Path

import jax.scipy.stats as jst
import numpy as np
import pytest
from scipy.special import logsumexp

import approxcv as acv

PAGE = Path(__file__).resolve().parent.parent / "docs" / "own_model.md"
#: the first statement after the model's definition in the page's second block
USAGE = "rng = np.random.default_rng(1)"


@pytest.fixture(scope="module")
def page():
    """The namespace of the page's model definition (its second block, up to the usage)."""
    blocks = PAGE.read_text().split("```python\n")
    source = blocks[2].split("```")[0]
    assert USAGE in source, "docs/own_model.md's structured example changed shape"
    namespace = {}
    exec(compile(source.split(USAGE)[0], str(PAGE), "exec"), namespace)
    return namespace


def _log_joint(model, p, x, z, kept):
    """log p(z, x_kept) of one latent path ``z`` (left-out emissions dropped)."""
    out = np.log(p.initial_probs[z[0]]) + sum(np.log(p.transition[a, b])
                                              for a, b in zip(z[:-1], z[1:]))
    em = np.asarray(jst.t.logpdf(x, model.nu, p.loc[list(z)], p.scale[list(z)]))
    return out + np.sum(em[kept])


def test_heldout_loss_and_objective_equal_enumeration(page):
    model = page["StudentTHMM"](2, nu=3.0)
    x = np.array([-1.2, 0.3, 1.9, 1.4, -0.8, 2.5])
    p = page["StudentTParams"](np.array([0.3, 0.7]), np.array([[0.8, 0.2], [0.35, 0.65]]),
                               np.array([-0.5, 1.5]), np.array([0.7, 1.1]))
    prepared, _, n = model.prepare(x)
    paths = list(itertools.product(range(2), repeat=n))
    everything = np.ones(n, bool)
    log_px = logsumexp([_log_joint(model, p, x, z, everything) for z in paths])
    w1 = np.ones(n)
    np.testing.assert_allclose(float(model.objective(p, prepared, w1)),
                               -log_px - float(model.log_prior(p)), rtol=1e-12)
    for out in ([2], [1, 4], [3, 4, 5]):
        kept = everything.copy()
        kept[out] = False
        log_pkept = logsumexp([_log_joint(model, p, x, z, kept) for z in paths])
        fold, points = model.heldout_loss(p, prepared, kept.astype(float))
        np.testing.assert_allclose(float(fold), log_pkept - log_px, rtol=1e-12)
        for t in out:           # -log p(x_t | x_kept): the kept set with x_t added back
            with_t = kept.copy()
            with_t[t] = True
            ref = log_pkept - logsumexp([_log_joint(model, p, x, z, with_t) for z in paths])
            np.testing.assert_allclose(float(points[t]), ref, rtol=1e-12)
        assert np.all(np.asarray(points)[kept] == 0)


def test_ij_is_right_or_flagged_against_refits(page):
    rng = np.random.default_rng(3)
    z = np.cumsum(rng.random(90) < 0.08) % 2
    x = np.where(z == 0, -1.0, 1.5) + 0.5 * rng.standard_t(4, 90)
    model = page["StudentTHMM"](2)
    params = model.fit(x)
    folds = acv.folds.contiguous(len(x), 0.05, 5, seed=0)
    ij = acv.cross_validate(model, x, folds, "ij", params=params, progress=False, warn=False)
    ex = acv.cross_validate(model, x, folds, "exact", params=params, progress=False)
    err = np.abs(ij.fold_loss - ex.fold_loss) / np.abs(ex.fold_loss)
    assert np.all((err <= 0.01) | ij.unreliable)
    assert np.sum(~ij.unreliable) >= 3
