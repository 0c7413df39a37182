"""BiLSTM-CRF feature extractor for sequence labelling (structured-CV paper, §5 and L.2).

A small bidirectional LSTM over word embeddings and a character CNN, a linear projection to
per-label emission scores and a linear-chain CRF output layer whose negative log-likelihood
uses the kernels of :mod:`approxcv.inference.crf` (:func:`~approxcv.inference.crf.log_partition`
and :func:`~approxcv.inference.crf.path_score`). It is trained end to end with Adam on
minibatches of sentences of similar length, with early stopping on a validation split; its
frozen per-token features (:func:`frozen_features`) then feed
:class:`~approxcv.models.LinearChainCRF`, whose CRF layer is cross-validated on its own
(the seed's protocol: every layer but the CRF is held fixed).

Architecture (per sentence of ``T`` words)::

    e_t = [word_emb(w_t); max_pool(conv1d(char_emb(chars of w_t)))]     (E + C_out,)
    h_t = [LSTM_fwd(e_1..e_t); LSTM_bwd(e_T..e_t)]                      (2H,)
    u_t = h_t P + c                                                     (K,)  emissions
    -log p(y | x) = log Z(u, A, start, stop) - s(y; u, A, start, stop)

Why equinox: it is already a dependency of approxcv, and its modules are pytrees of
arrays, so ``jax.grad`` and ``optax`` apply to the whole network directly (no separate
parameter dictionaries), ``jax.vmap`` batches the per-sentence functions, and
``eqx.filter_jit`` compiles one program per padded batch shape.

No pretrained embeddings are available offline: word embeddings are learned, from a
vocabulary of lowercased words seen at least ``min_count`` times (capped at ``max_words``),
with an unknown token; the character CNN (on the original casing) covers rare and unseen
words.

Pure functions (vocabulary, encoding, batching, loss) plus one module :class:`BiLSTMCRF`;
:func:`train` is the seeded training loop.
"""
from __future__ import annotations

import collections
import math
import time
from typing import NamedTuple

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import optax

from ...inference import crf
from .linear_chain import LinearChainCRFParams

__all__ = ["Vocab", "Batch", "BiLSTMCRF", "build_vocab", "encode", "make_batches",
           "sentence_nll", "batch_loss", "train", "frozen_features", "TrainResult"]

PAD, UNK = 0, 1
#: characters kept per word (longer words are truncated: the CNN sees their first ones)
MAX_CHARS = 16
#: padded sentence lengths are rounded up to a multiple of this (fewer compiled shapes)
LENGTH_STEP = 8


# ---------------------------------------------------------------- vocabulary
class Vocab(NamedTuple):
    """Word and character indices; 0 is padding, 1 the unknown token."""
    words: dict
    chars: dict
    lowercase: bool


def build_vocab(sentences, *, max_words: int = 10000, min_count: int = 2,
                lowercase: bool = True) -> Vocab:
    """Vocabulary of the training ``sentences`` (lists of word strings).

    Words (lowercased if ``lowercase``) seen at least ``min_count`` times, the
    ``max_words`` most frequent (ties broken alphabetically, so the result is
    deterministic); characters seen at least once. Others map to the unknown token.
    """
    counts = collections.Counter(w.lower() if lowercase else w
                                 for s in sentences for w in s)
    kept = sorted((w for w, c in counts.items() if c >= min_count),
                  key=lambda w: (-counts[w], w))[:max_words]
    chars = sorted({ch for s in sentences for w in s for ch in w})
    return Vocab({w: i + 2 for i, w in enumerate(kept)},
                 {ch: i + 2 for i, ch in enumerate(chars)}, bool(lowercase))


def encode(vocab: Vocab, words) -> tuple[np.ndarray, np.ndarray]:
    """``(word_ids (T,), char_ids (T, MAX_CHARS))`` of one sentence (0-padded chars)."""
    wid = np.array([vocab.words.get(w.lower() if vocab.lowercase else w, UNK) for w in words],
                   dtype=np.int32)
    cid = np.zeros((len(words), MAX_CHARS), dtype=np.int32)
    for t, w in enumerate(words):
        ids = [vocab.chars.get(ch, UNK) for ch in w[:MAX_CHARS]]
        cid[t, :len(ids)] = ids
    return wid, cid


class Batch(NamedTuple):
    """Padded sentences: ``words (B, T)``, ``chars (B, T, MAX_CHARS)``, ``labels (B, T)``,
    ``mask (B, T)`` (1 on words), ``index (B,)`` (sentence indices in the input list)."""
    words: np.ndarray
    chars: np.ndarray
    labels: np.ndarray
    mask: np.ndarray
    index: np.ndarray


def _padded_length(t: int) -> int:
    return LENGTH_STEP * math.ceil(t / LENGTH_STEP)


def make_batches(encoded, labels, batch_size: int, *, shuffle: bool = False,
                 seed: int = 0) -> list[Batch]:
    """Batches of ``batch_size`` sentences of similar length.

    Sentences are sorted by length (randomly among equal lengths when ``shuffle``) and cut
    into consecutive groups, each padded to its longest sentence rounded up to a multiple
    of :data:`LENGTH_STEP`; with ``shuffle`` the order of the batches is random too.

    Args:
        encoded: list of ``(word_ids, char_ids)`` from :func:`encode`.
        labels: list of ``(T,)`` integer label arrays (or ``None``: zeros).
    """
    rng = np.random.default_rng(seed)
    lengths = np.array([len(w) for w, _ in encoded])
    tie = rng.random(len(lengths)) if shuffle else np.arange(len(lengths))
    order = np.lexsort((tie, lengths))
    groups = [order[i:i + batch_size] for i in range(0, len(order), batch_size)]
    if shuffle:
        groups = [groups[i] for i in rng.permutation(len(groups))]
    out = []
    for g in groups:
        t = _padded_length(int(lengths[g].max()))
        words = np.zeros((len(g), t), np.int32)
        chars = np.zeros((len(g), t, MAX_CHARS), np.int32)
        labs = np.zeros((len(g), t), np.int32)
        mask = np.zeros((len(g), t), np.float32)
        for r, i in enumerate(g):
            n = lengths[i]
            words[r, :n], chars[r, :n] = encoded[i]
            if labels is not None:
                labs[r, :n] = labels[i]
            mask[r, :n] = 1.0
        out.append(Batch(words, chars, labs, mask, np.asarray(g)))
    return out


# -------------------------------------------------------------------- module
class BiLSTMCRF(eqx.Module):
    """Word embeddings + character CNN -> BiLSTM -> emissions -> linear-chain CRF.

    Args:
        num_words, num_chars: vocabulary sizes (including padding and unknown).
        num_labels: ``K``.
        key: ``jax.random`` key of the initialisation.
        word_dim, char_dim, char_channels, hidden: embedding sizes, CNN channels and LSTM
            units per direction.
        dropout: dropout rate on the token inputs and the BiLSTM outputs in training.
        dtype: parameter dtype (``float32``: training is the costly part, the CRF layer is
            refitted in 64 bits on the frozen features).
    """
    word_emb: eqx.nn.Embedding
    char_emb: eqx.nn.Embedding
    char_conv: eqx.nn.Conv1d
    fwd: eqx.nn.LSTMCell
    bwd: eqx.nn.LSTMCell
    proj: eqx.nn.Linear
    transitions: jax.Array
    start: jax.Array
    stop: jax.Array
    dropout: float = eqx.field(static=True)

    def __init__(self, num_words: int, num_chars: int, num_labels: int, *, key,
                 word_dim: int = 50, char_dim: int = 16, char_channels: int = 16,
                 hidden: int = 32, dropout: float = 0.25, dtype=jnp.float32):
        k = jax.random.split(key, 6)
        self.word_emb = eqx.nn.Embedding(num_words, word_dim, key=k[0], dtype=dtype)
        self.char_emb = eqx.nn.Embedding(num_chars, char_dim, key=k[1], dtype=dtype)
        self.char_conv = eqx.nn.Conv1d(char_dim, char_channels, 3, padding=1, key=k[2],
                                       dtype=dtype)
        self.fwd = eqx.nn.LSTMCell(word_dim + char_channels, hidden, key=k[3], dtype=dtype)
        self.bwd = eqx.nn.LSTMCell(word_dim + char_channels, hidden, key=k[4], dtype=dtype)
        self.proj = eqx.nn.Linear(2 * hidden, num_labels, key=k[5], dtype=dtype)
        self.transitions = jnp.zeros((num_labels, num_labels), dtype)
        self.start = jnp.zeros(num_labels, dtype)
        self.stop = jnp.zeros(num_labels, dtype)
        self.dropout = float(dropout)

    @property
    def hidden(self) -> int:
        return self.fwd.hidden_size

    def token_inputs(self, words, chars):
        """``(T, E + C_out)``: word embedding and max-pooled character CNN per token."""
        w = jax.vmap(self.word_emb)(words)

        def char_rep(ids):                       # (MAX_CHARS,) -> (C_out,)
            e = jax.vmap(self.char_emb)(ids).T   # (char_dim, MAX_CHARS)
            h = jax.nn.relu(self.char_conv(e))   # (C_out, MAX_CHARS)
            on = (ids > 0)[None, :]
            return jnp.max(jnp.where(on, h, 0.0), axis=1)
        return jnp.concatenate([w, jax.vmap(char_rep)(chars)], axis=1)

    def hidden_states(self, words, chars, mask, key=None):
        """BiLSTM outputs ``(T, 2H)`` of one padded sentence (zeros on padding).

        The backward LSTM runs over the words only: positions are reversed within the
        sentence length, so trailing padding never enters either direction.
        """
        x = self.token_inputs(words, chars)
        if key is not None and self.dropout > 0:
            key, sub = jax.random.split(key)
            x = _dropout(x, self.dropout, sub)
        num_t = words.shape[0]
        length = jnp.sum(mask > 0).astype(jnp.int32)
        t = jnp.arange(num_t)
        rev = jnp.where(t < length, length - 1 - t, t)
        h_f = _run_lstm(self.fwd, x)
        h_b = _run_lstm(self.bwd, x[rev])[rev]
        h = jnp.concatenate([h_f, h_b], axis=1) * mask[:, None]
        if key is not None and self.dropout > 0:
            h = _dropout(h, self.dropout, key)
        return h

    def emissions(self, words, chars, mask, key=None):
        """Per-token label scores ``(T, K)``."""
        return jax.vmap(self.proj)(self.hidden_states(words, chars, mask, key))


def _dropout(x, rate, key):
    keep = jax.random.bernoulli(key, 1.0 - rate, x.shape)
    return jnp.where(keep, x / (1.0 - rate), 0.0)


def _run_lstm(cell, x):
    """Hidden states ``(T, H)`` of ``cell`` over the inputs ``x (T, d)`` from zero state."""
    zeros = jnp.zeros(cell.hidden_size, x.dtype)

    def step(state, x_t):
        state = cell(x_t, state)
        return state, state[0]
    _, h = jax.lax.scan(step, (zeros, zeros), x)
    return h


# ---------------------------------------------------------------------- loss
def sentence_nll(model: BiLSTMCRF, words, chars, labels, mask, key=None):
    """``-log p(y | x)`` of one padded sentence: ``log Z - s(y)`` with the CRF kernels."""
    u = model.emissions(words, chars, mask, key)
    log_z = crf.log_partition(u, model.transitions, model.start, model.stop, mask)
    return log_z - crf.path_score(u, model.transitions, model.start, model.stop, mask, labels)


def batch_loss(model: BiLSTMCRF, batch: Batch, key=None):
    """Summed negative log-likelihood of a batch (``key``: dropout, training only)."""
    keys = None if key is None else jax.random.split(key, batch.words.shape[0])
    nll = jax.vmap(sentence_nll, (None, 0, 0, 0, 0, None if key is None else 0))(
        model, batch.words, batch.chars, batch.labels, batch.mask, keys)
    return jnp.sum(nll)


@eqx.filter_jit
def _eval_loss(model, words, chars, labels, mask):
    return batch_loss(model, Batch(words, chars, labels, mask, None))


def dataset_loss(model: BiLSTMCRF, batches) -> float:
    """Mean negative log-likelihood per token over ``batches`` (no dropout)."""
    total = sum(float(_eval_loss(model, b.words, b.chars, b.labels, b.mask)) for b in batches)
    return total / sum(float(b.mask.sum()) for b in batches)


# ------------------------------------------------------------------ training
class TrainResult(NamedTuple):
    """Best model (lowest validation loss), the per-epoch history and the seconds spent."""
    model: BiLSTMCRF
    history: list
    seconds: float


def train(model: BiLSTMCRF, train_batches_fn, valid_batches, *, epochs: int = 10,
          patience: int = 2, learning_rate: float = 1e-2, seed: int = 0,
          clip: float = 5.0, verbose: bool = False) -> TrainResult:
    """Adam on minibatches with early stopping on the validation loss.

    Args:
        model: the initial :class:`BiLSTMCRF`.
        train_batches_fn: ``epoch -> list of Batch`` (e.g. :func:`make_batches` with
            ``shuffle=True, seed=epoch``), so every epoch sees a new order.
        valid_batches: batches of the validation split.
        epochs: most epochs; training stops after ``patience`` epochs without a lower
            validation loss, and the best model is returned.
        learning_rate: Adam step size (gradient norms clipped at ``clip``); the loss is
            the mean negative log-likelihood per token of the batch.
        seed: dropout randomness.
    """
    opt = optax.chain(optax.clip_by_global_norm(clip), optax.adam(learning_rate))
    state = opt.init(eqx.filter(model, eqx.is_inexact_array))

    @eqx.filter_jit
    def step(model, state, words, chars, labels, mask, key):
        def loss(m):
            return batch_loss(m, Batch(words, chars, labels, mask, None), key) / jnp.sum(mask)
        value, grads = eqx.filter_value_and_grad(loss)(model)
        updates, state = opt.update(grads, state, eqx.filter(model, eqx.is_inexact_array))
        return eqx.apply_updates(model, updates), state, value

    key = jax.random.PRNGKey(seed)
    t0 = time.perf_counter()
    best, best_loss, bad, history = model, dataset_loss(model, valid_batches), 0, []
    history.append({"epoch": 0, "train_loss": None, "valid_loss": best_loss,
                    "seconds": time.perf_counter() - t0})
    for epoch in range(1, epochs + 1):
        losses, tokens = 0.0, 0.0
        for b in train_batches_fn(epoch):
            key, sub = jax.random.split(key)
            model, state, value = step(model, state, b.words, b.chars, b.labels, b.mask, sub)
            n = float(b.mask.sum())
            losses, tokens = losses + float(value) * n, tokens + n
        valid = dataset_loss(model, valid_batches)
        history.append({"epoch": epoch, "train_loss": losses / tokens, "valid_loss": valid,
                        "seconds": time.perf_counter() - t0})
        if verbose:
            print(f"epoch {epoch}: train {losses / tokens:.4f} valid {valid:.4f} "
                  f"({history[-1]['seconds']:.0f}s)", flush=True)
        if valid < best_loss:
            best, best_loss, bad = model, valid, 0
        else:
            bad += 1
            if bad >= patience:
                break
    return TrainResult(best, history, time.perf_counter() - t0)


# ------------------------------------------------------------ frozen features
@eqx.filter_jit
def _features(model, words, chars, mask, emissions: bool):
    f = model.emissions if emissions else model.hidden_states
    return jax.vmap(f)(words, chars, mask)


def frozen_features(model: BiLSTMCRF, encoded, *, kind: str = "emissions",
                    batch_size: int = 64) -> list[np.ndarray]:
    """Per-token features ``(T, F)`` (float64) of every sentence, without dropout.

    ``kind="emissions"``: the projection to label scores (``F = K``; with identity weights
    a :class:`~approxcv.models.LinearChainCRF` on them reproduces the network's CRF layer);
    ``kind="hidden"``: the BiLSTM outputs (``F = 2H``). Deterministic: the same model and
    sentences give the same features.
    """
    if kind not in ("emissions", "hidden"):
        raise ValueError(f"`kind` must be 'emissions' or 'hidden', got {kind!r}")
    out = [None] * len(encoded)
    for b in make_batches(encoded, None, batch_size):
        f = np.asarray(_features(model, b.words, b.chars, b.mask, kind == "emissions"),
                       dtype=np.float64)
        for r, i in enumerate(b.index):
            out[i] = f[r, :len(encoded[i][0])]
    return out


def crf_layer_params(model: BiLSTMCRF):
    """The network's CRF layer as :class:`~approxcv.models.LinearChainCRFParams` for
    ``LinearChainCRF(K)`` on ``kind="emissions"`` features: identity weights, zero bias,
    the trained transitions, start and stop scores (float64)."""
    k = model.transitions.shape[0]
    f64 = lambda a: np.asarray(a, dtype=np.float64)   # noqa: E731
    return LinearChainCRFParams(np.eye(k), np.zeros(k), f64(model.transitions),
                                f64(model.start), f64(model.stop))
