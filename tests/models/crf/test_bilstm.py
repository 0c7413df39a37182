"""BiLSTM-CRF feature extractor on a tiny synthetic corpus (seconds)."""
import jax
import numpy as np
import pytest

from approxcv.models import LinearChainCRF
from approxcv.models.crf import bilstm

WORDS = ["the", "a", "cat", "dog", "Paris", "London", "Bob", "Alice", "runs", "sees", "in"]
NAMES = {"Paris": 1, "London": 1, "Bob": 2, "Alice": 2}


def corpus(n=20, seed=0):
    rng = np.random.default_rng(seed)
    sents, labels = [], []
    for _ in range(n):
        s = list(rng.choice(WORDS, size=rng.integers(2, 7)))
        sents.append(s)
        labels.append(np.array([NAMES.get(w, 0) for w in s]))
    return sents, labels


@pytest.fixture(scope="module")
def setup():
    sents, labels = corpus()
    vocab = bilstm.build_vocab(sents, min_count=1)
    enc = [bilstm.encode(vocab, s) for s in sents]
    model = bilstm.BiLSTMCRF(len(vocab.words) + 2, len(vocab.chars) + 2, 3,
                             key=jax.random.PRNGKey(0), word_dim=8, char_dim=4,
                             char_channels=4, hidden=6)
    return sents, labels, vocab, enc, model


def test_vocab_unknown_and_lowercase():
    vocab = bilstm.build_vocab([["The", "the", "cat"]], min_count=2)
    wid, cid = bilstm.encode(vocab, ["THE", "cat", "zebra"])
    assert wid[0] == vocab.words["the"] and wid[1] == bilstm.UNK and wid[2] == bilstm.UNK
    assert cid.shape == (3, bilstm.MAX_CHARS) and cid[2, 0] == bilstm.UNK


def test_batches_pad_and_mask(setup):
    sents, labels, _, enc, _ = setup
    batches = bilstm.make_batches(enc, labels, 6, shuffle=True, seed=1)
    assert sorted(np.concatenate([b.index for b in batches]).tolist()) == list(range(20))
    for b in batches:
        assert b.words.shape[1] % bilstm.LENGTH_STEP == 0
        np.testing.assert_array_equal(b.mask.sum(1), [len(sents[i]) for i in b.index])


def test_training_lowers_loss_and_features(setup):
    sents, labels, _, enc, model = setup
    valid = bilstm.make_batches(enc, labels, 8)
    res = bilstm.train(model, lambda e: bilstm.make_batches(enc, labels, 5, shuffle=True,
                                                            seed=e),
                       valid, epochs=2, patience=5, learning_rate=0.05)
    losses = [h["valid_loss"] for h in res.history]
    assert losses[-1] < losses[0]
    feats = bilstm.frozen_features(res.model, enc)
    assert [f.shape for f in feats] == [(len(s), 3) for s in sents]
    hid = bilstm.frozen_features(res.model, enc, kind="hidden")
    assert [f.shape for f in hid] == [(len(s), 12) for s in sents]
    again = bilstm.frozen_features(res.model, enc, batch_size=3)
    for a, b in zip(feats, again):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(feats[0], bilstm.frozen_features(res.model, enc)[0])
    # the network's CRF layer, as LinearChainCRF params on the emissions, gives its NLL
    crf = LinearChainCRF(3)
    data = list(zip(feats, labels))
    params = bilstm.crf_layer_params(res.model)
    nll = float(crf.objective(params, data, np.ones(20)) + crf.log_prior(params))
    net = sum(float(bilstm._eval_loss(res.model, b.words, b.chars, b.labels, b.mask))
              for b in valid)
    assert nll == pytest.approx(net, rel=1e-4)
