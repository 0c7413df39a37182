"""Cross-validation fold schemes.

A fold is the set ``o`` of unit indices left out; its weight vector ``w_o`` has zeros on
``o`` and ones elsewhere. :class:`Folds` stores the index sets and builds the stacked
``(n_folds, n)`` 0/1 weight matrix that the engine ``vmap``s over, the way
scikit-learn's splitters build test masks.

A fold may also remove more than it scores: the pair of the units removed from training
``R`` and the units scored ``S`` (``S`` a non-empty subset of ``R``, ``Folds(...,
scored=)``), whose held-out loss is ``-log p(x_S | x_K)`` (``K`` the kept units) with the
removed units that are not scored (``R \\ S``) marginalised out: leave-future-out with a
horizon, h-block CV (:func:`hblock`), spatial blocks with a buffer (:func:`neighbourhood`).

Example
-------
>>> import approxcv as acv
>>> folds = acv.folds.contiguous(100, 0.1, n_folds=3, seed=0)
>>> len(folds), folds[0].shape, folds.weights().shape
(3, (10,), (3, 100))
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ._validate import check_adjacency, check_positive_int
from .errors import (ArgumentTypeError, DuplicateFoldIdError, DuplicateIndexError,
                     EmptyFoldError, EmptyScoredError, FoldIndexError, FoldRemovesAllError,
                     InvalidArgumentError, ScoredNotRemovedError)

__all__ = ["Folds", "iid", "contiguous", "leave_future_out", "leave_one_out", "kfold",
           "hblock", "neighbourhood", "as_folds", "future_origins"]


class Folds(Sequence):
    """Validated left-out index sets over ``n`` units.

    Parameters
    ----------
    indices : sequence of integer arrays
        ``indices[i]`` are the units left out by fold ``i``.
    n : int
        Number of units (time steps, sites or sequences).
    ids : array of int, optional
        Distinct identifiers of the folds (default ``0..n_folds-1``); kept by :meth:`subset`
        so that results on a subset of folds can be matched with results on all of them
        (exact refits and checkpoints are matched by id, so two folds never share one).
    width : int, optional
        The least row width of :meth:`padded` (default: the largest fold size), so that
        fold sets of similar sizes share one shape of the engine's programs
        (:func:`approxcv._runtime.sizes.length_bucket`); kept by :meth:`subset`.
    scored : sequence of integer arrays, optional
        ``scored[i]``: the units fold ``i`` scores, a non-empty subset of ``indices[i]``
        (default ``None``: every removed unit is scored). The fold's held-out loss is then
        ``-log p(x_S | x_K)`` with the removed units it does not score marginalised out, and
        its point losses are those of the scored units; kept by :meth:`subset` and
        :meth:`in_units`.

    Raises
    ------
    ScoredNotRemovedError
        A fold scores a unit it does not remove.
    EmptyScoredError
        A fold scores no unit.
    """

    def __init__(self, indices, n: int, ids=None, *, width: int | None = None,
                 scored=None, _owned: bool = False):
        n = check_positive_int("n", n)
        self.width = None if width is None else check_positive_int("width", width)
        if isinstance(indices, (str, bytes)) or not isinstance(indices, Sequence | np.ndarray):
            raise ArgumentTypeError(
                f"`folds` must be a sequence of integer index arrays, got {type(indices).__name__}")
        if len(indices) == 0:
            raise EmptyFoldError("`folds` is empty: at least one fold is needed")
        self.n = n
        self._flat, self._sizes = _check_folds(indices, n, _owned)
        self._indices = np.split(self._flat, np.cumsum(self._sizes)[:-1])
        self._padded = self._unscored = self._scored_mask = None
        self.ids = np.arange(len(self._indices)) if ids is None else _check_ids(
            ids, len(self._indices))
        self._scored = None if scored is None else _check_scored(scored, self._indices)

    def __len__(self) -> int:
        return len(self._indices)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self.subset(np.arange(len(self))[i])
        return self._indices[i]

    def __repr__(self) -> str:
        scored = "" if self._scored is None else (
            f", scored sizes {self.scored_sizes.min()}..{self.scored_sizes.max()}")
        return (f"Folds(n_folds={len(self)}, n={self.n}, "
                f"fold sizes {self._sizes.min()}..{self._sizes.max()}{scored})")

    @property
    def sizes(self) -> np.ndarray:
        """``(n_folds,)`` number of units each fold leaves out."""
        return self._sizes

    @property
    def partial(self) -> bool:
        """Whether some fold removes a unit it does not score (``scored=`` given and not
        every removed unit scored)."""
        return self._scored is not None

    @property
    def scored(self) -> list:
        """The units each fold scores (sorted arrays; the removed units where every removed
        unit is scored): the units of the point losses of a result."""
        return self._indices if self._scored is None else self._scored

    @property
    def scored_sizes(self) -> np.ndarray:
        """``(n_folds,)`` number of units each fold scores."""
        if self._scored is None:
            return self._sizes
        return np.array([s.size for s in self._scored], dtype=np.int64)

    def scored_mask(self) -> np.ndarray:
        """``(n_folds, m)`` bool over the positions of :meth:`padded`: True where the
        removed unit there is scored (padding is False). Read-only, built once."""
        if self._scored_mask is None:
            index = self.padded()
            if self._scored is None:
                mask = index < self.n
            else:
                mask = np.zeros(index.shape, bool)
                for i, s in enumerate(self._scored):
                    mask[i] = np.isin(index[i], s)
            mask.flags.writeable = False
            self._scored_mask = mask
        return self._scored_mask

    def unscored_padded(self) -> np.ndarray | None:
        """``(n_folds, m')`` the removed units each fold does not score, ``R \\ S``
        (sorted), each row padded with ``n`` to ``m'``, the largest such set (a fold that
        scores every unit it removes gives a row of padding only); ``None`` where every
        fold scores every unit it removes (:attr:`partial` false). Read-only, built once."""
        if self._scored is None:
            return None
        if self._unscored is None:
            rest = [np.setdiff1d(r, s, assume_unique=True)
                    for r, s in zip(self._indices, self._scored)]
            sizes = np.array([r.size for r in rest], dtype=np.int64)
            out = np.full((len(self), max(int(sizes.max()), 1)), self.n, dtype=np.int64)
            for i, r in enumerate(rest):
                out[i, :r.size] = r
            out.flags.writeable = False
            self._unscored = out
        return self._unscored

    def padded(self) -> np.ndarray:
        """``(n_folds, m)`` left-out indices (sorted), each row padded with ``n`` (out of
        range) to ``m``, the largest fold size (or ``width`` if larger): the form the engine
        batches over. Read-only, built once (for folds of one size ``m``, a view of the
        indices: no copy)."""
        if self._padded is None:
            m = max(int(self._sizes.max()), self.width or 0)
            if np.all(self._sizes == m):
                out = self._flat.reshape(len(self), m).view()
            else:
                out = np.full((len(self), m), self.n, dtype=np.int64)
                out[np.arange(m)[None, :] < self._sizes[:, None]] = self._flat
            out.flags.writeable = False
            self._padded = out
        return self._padded

    def weights(self) -> np.ndarray:
        """Return the ``(n_folds, n)`` float array with 0 on left-out units and 1 elsewhere
        (memory ``n_folds * n``; the engine builds weights per batch instead)."""
        w = np.ones((len(self), self.n))
        w[np.repeat(np.arange(len(self)), self._sizes), self._flat] = 0.0
        return w

    def subset(self, which) -> "Folds":
        """Return the folds at positions ``which``, keeping their original ``ids``."""
        which = np.atleast_1d(np.asarray(which, dtype=int))
        if which.size and (which.min() < -len(self) or which.max() >= len(self)):
            raise InvalidArgumentError(f"`which` must index folds 0..{len(self) - 1}")
        if np.unique(which % len(self)).size < which.size:
            raise InvalidArgumentError("`which` lists a fold more than once (fold ids must stay "
                                       "distinct)")
        scored = None if self._scored is None else [self._scored[i] for i in which]
        return Folds([self._indices[i] for i in which], self.n, ids=self.ids[which],
                     width=self.width, scored=scored)

    def in_units(self, n: int, width: int | None = None) -> "Folds":
        """The same folds (and ids) over ``n >= self.n`` units, padded to ``width``: the
        form the engine runs them in when a model pads its data with null units
        (:meth:`approxcv.models.base.Model.padded_units`)."""
        if n < self.n:
            raise InvalidArgumentError(f"`n` must be at least the folds' {self.n} units, "
                                       f"got {n}")
        return Folds(self._indices, n, ids=self.ids, width=width, scored=self._scored)


def _check_ids(ids, n_folds: int) -> np.ndarray:
    """``ids`` as ``(n_folds,)`` distinct integers, or raise naming ``ids``."""
    try:
        arr = np.asarray(ids)
    except ValueError:   # ragged nesting
        raise InvalidArgumentError("`ids` must be a flat sequence of integers") from None
    if arr.shape != (n_folds,):
        raise InvalidArgumentError(f"`ids` must have one entry per fold ({n_folds}), got shape "
                                   f"{arr.shape}")
    if arr.dtype.kind == "f" and np.all(np.isfinite(arr)) and np.all(arr == np.round(arr)):
        arr = arr.astype(np.int64)
    if arr.dtype.kind not in "iu":
        raise InvalidArgumentError(f"`ids` must be integers, got dtype {arr.dtype}")
    arr = arr.astype(int)
    uniq, counts = np.unique(arr, return_counts=True)
    if np.any(counts > 1):
        raise DuplicateFoldIdError(f"`ids` lists fold id {int(uniq[counts > 1][0])} more than "
                                   "once; every fold needs its own id")
    return arr


def _check_scored(scored, removed: list) -> list | None:
    """The scored sets as sorted int64 arrays, one per fold, each a non-empty subset of its
    removed set ``removed[i]``; ``None`` where every fold scores every unit it removes
    (today's meaning, no extra cost). Raises naming the first offending fold."""
    if isinstance(scored, (str, bytes)) or not isinstance(scored, Sequence | np.ndarray):
        raise ArgumentTypeError(f"`scored` must be a sequence of integer index arrays, one "
                                f"per fold, got {type(scored).__name__}")
    if len(scored) != len(removed):
        raise InvalidArgumentError(f"`scored` must give one index set per fold "
                                   f"({len(removed)}), got {len(scored)}")
    out, every = [], True
    for i, (s, r) in enumerate(zip(scored, removed)):
        a = _as_index_array(s, i, "scored")
        if a.size == 0:
            raise EmptyScoredError(f"fold {i} of `scored` is empty: every fold must score at "
                                   "least one of the units it removes")
        if a.dtype.kind not in "iuf" or (a.dtype.kind == "f" and np.any(a != np.round(a))):
            raise FoldIndexError(f"fold {i} of `scored` must contain integer indices, got "
                                 f"{a.dtype}")
        a = np.sort(a.astype(np.int64))
        if np.any(a[1:] == a[:-1]):
            raise DuplicateIndexError(f"fold {i} of `scored` lists an index more than once")
        outside = a[~np.isin(a, r)]
        if outside.size:
            raise ScoredNotRemovedError(
                f"fold {i} scores unit {int(outside[0])}, which it does not remove: the "
                "scored units of a fold must be among its removed units (add the unit to "
                "the fold's indices or drop it from `scored`)")
        every &= a.size == r.size
        out.append(a)
    return None if every else out


def _as_index_array(idx, i: int, name: str = "folds") -> np.ndarray:
    """Fold ``i`` as a flat array, or raise if it is a ragged nesting of sequences."""
    try:
        return np.asarray(idx).reshape(-1)
    except ValueError:
        raise FoldIndexError(f"fold {i} of `{name}` is ragged (nested sequences of different "
                             "lengths); each fold must be a flat sequence of integer "
                             "indices") from None


def _check_folds(indices, n: int, owned: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Validate every fold at once: ``(sorted indices of all folds concatenated, sizes)``.

    A 2-D integer array is read as one fold per row without a list of rows (``owned``: an
    int64 array this module built, sorted in place, no copy). Errors name the first
    offending fold.
    """
    if isinstance(indices, np.ndarray) and indices.ndim == 2 and indices.dtype.kind in "iu" \
            and indices.shape[1] > 0:
        flat = np.array(indices, dtype=np.int64, copy=not owned).reshape(-1)
        return _check_flat(flat, np.full(indices.shape[0], indices.shape[1], np.int64), n)
    arrays = [_as_index_array(idx, i) for i, idx in enumerate(indices)]
    sizes = np.array([a.size for a in arrays], dtype=np.int64)
    if np.any(sizes == 0):
        raise EmptyFoldError(f"fold {int(np.argmin(sizes))} of `folds` is empty: it must leave "
                             "out at least one unit")
    for i, a in enumerate(arrays):     # dtype per fold (cheap; the checks below are vectorised)
        if a.dtype.kind == "b":
            raise FoldIndexError(f"fold {i} of `folds` is boolean; pass integer indices")
        if a.dtype.kind not in "iuf":
            raise FoldIndexError(f"fold {i} of `folds` must contain integers, got dtype {a.dtype}")
    flat = np.concatenate(arrays)
    del arrays
    return _check_flat(flat, sizes, n)


def _check_flat(flat, sizes, n: int):
    """:func:`_check_folds` on the indices of all folds concatenated (``flat``, a new
    array: sorted within each fold in place) and the fold ``sizes``."""
    starts = np.cumsum(sizes) - sizes

    def fold_of(k):
        """The fold holding position ``k`` of ``flat``."""
        return int(np.searchsorted(starts, k, side="right") - 1)
    if flat.dtype.kind == "f":
        bad = ~np.isfinite(flat) | (flat != np.round(np.nan_to_num(flat)))
        if bad.any():
            raise FoldIndexError(f"fold {fold_of(np.flatnonzero(bad)[0])} of `folds` contains "
                                 "non-integer indices")
    flat = flat.astype(np.int64, copy=False)
    out = (flat < 0) | (flat >= n)
    if out.any():
        k = int(np.flatnonzero(out)[0])
        raise FoldIndexError(f"fold {fold_of(k)} of `folds` has index {int(flat[k])} "
                             f"outside [0, {n})")
    del out
    for part in np.split(flat, starts[1:]):     # sorted within each fold, in place
        part.sort()
    dup = flat[1:] == flat[:-1]
    dup[starts[1:] - 1] = False                 # the first unit of a fold follows another
    if dup.any():
        raise DuplicateIndexError(f"fold {fold_of(np.flatnonzero(dup)[0] + 1)} of `folds` "
                                  "lists an index more than once")
    if np.any(sizes == n):
        raise FoldRemovesAllError(
            f"fold {int(np.argmax(sizes == n))} of `folds` leaves out all {n} units; nothing "
            "would remain to train on")
    return flat, sizes


def as_folds(folds, n: int) -> Folds:
    """Return ``folds`` as validated :class:`Folds` over ``n`` units.

    Accepts a :class:`Folds` (its ``n`` must match) or any sequence of integer arrays.
    """
    if isinstance(folds, Folds):
        if folds.n != n:
            raise InvalidArgumentError(
                f"`folds` were built for n={folds.n} units but the data have {n}")
        return folds
    return Folds(folds, n)


def future_origins(folds: Folds) -> np.ndarray | None:
    """``(n_folds,)`` the origin ``s`` of every fold where every fold removes a suffix
    ``{s, ..., e}`` of the units with one common last unit ``e`` (``e = n - 1`` for
    :func:`leave_future_out`; over a model's padded units, the data's last unit) and at
    least two origins differ: leave-future-out folds, with or without a horizon; else
    ``None``. ``method="auto"`` walks such folds by origin (:mod:`approxcv.engine.methods.
    auto`), and their unreliable-fold warnings give the advice for them."""
    if not isinstance(folds, Folds) or len(folds) < 2:
        return None
    sizes = folds.sizes
    ends = np.cumsum(sizes) - 1
    last = folds._flat[ends]
    first = folds._flat[ends - sizes + 1]
    if np.any(last != last[0]) or np.any(last - first + 1 != sizes):
        return None                 # sorted and distinct within a fold: contiguous iff so
    return None if np.all(first == first[0]) else first.copy()


def _fold_size(n: int, frac: float) -> int:
    if not np.isscalar(frac) or not 0.0 < float(frac) < 1.0:
        raise InvalidArgumentError(f"`frac` must be in (0, 1), got {frac!r}")
    size = int(np.floor(frac * n))
    if size < 1:
        raise InvalidArgumentError(
            f"`frac`={frac} of n={n} units leaves out fewer than one unit per fold")
    return size


def iid(n: int, frac: float, n_folds: int, seed: int = 0) -> Folds:
    """Folds of ``floor(frac * n)`` units drawn uniformly without replacement, independently per fold."""
    n = check_positive_int("n", n, 2)
    n_folds = check_positive_int("n_folds", n_folds)
    size = _fold_size(n, frac)
    rng = np.random.default_rng(seed)
    rows = np.empty((n_folds, size), dtype=np.int64)    # one array: no list of folds
    for i in range(n_folds):
        rows[i] = rng.choice(n, size, replace=False)
    return Folds(rows, n, _owned=True)


def contiguous(n: int, frac: float, n_folds: int, seed: int = 0) -> Folds:
    """Contiguous blocks: draw an end index ``e`` uniformly from ``{L, ..., n}`` and leave
    out the block ``{e - L, ..., e - 1}`` of length ``L = floor(frac * n)`` before it
    (the rule of Ghosh et al., 2020, "Approximate CV for structured models")."""
    n = check_positive_int("n", n, 2)
    n_folds = check_positive_int("n_folds", n_folds)
    size = _fold_size(n, frac)
    ends = np.random.default_rng(seed).integers(size, n + 1, size=n_folds)
    return Folds([np.arange(e - size, e) for e in ends], n)


def leave_future_out(n: int, starts, horizon: int | None = None) -> Folds:
    """Fold ``i`` removes the future ``{starts[i], ..., n - 1}`` from training; each start
    must be in ``[1, n)``.

    ``horizon=None``: every removed unit is scored (the fold loss is ``-log p(x_{s:} |
    x_{<s})``). ``horizon=M``: the fold scores the next ``M`` units only, ``{s, ..., s + M -
    1}``, the rest of the future marginalised out (``-log p(x_{s:s+M} | x_{<s})``; ``M =
    1``: one-step-ahead prediction), so every start needs ``s + M <= n``.

    Raises:
        FoldIndexError: a start outside ``[1, n)``, or a horizon that runs past the end
            (the message names the largest valid start or horizon).
    """
    n = check_positive_int("n", n, 2)
    starts = np.atleast_1d(np.asarray(starts))
    if starts.size == 0:
        raise EmptyFoldError("`starts` is empty: give at least one start index")
    if starts.dtype.kind not in "iu":
        raise FoldIndexError(f"`starts` must be integers, got dtype {starts.dtype}")
    if starts.min() < 1 or starts.max() >= n:
        bad = int(starts.min() if starts.min() < 1 else starts.max())
        if bad == 0:
            raise FoldRemovesAllError("`starts` contains 0, which leaves out every unit")
        raise FoldIndexError(f"`starts` has value {bad} outside [1, {n})")
    folds = [np.arange(s, n) for s in starts]
    if horizon is None:
        return Folds(folds, n)
    horizon = check_positive_int("horizon", horizon)
    last = int(starts.max())
    if last + horizon > n:
        raise FoldIndexError(
            f"`horizon`={horizon} from start {last} runs past the end of the {n} units: the "
            f"largest valid start for this horizon is {n - horizon}, the largest valid "
            f"horizon for these starts is {n - last}")
    return Folds(folds, n, scored=[np.arange(s, s + horizon) for s in starts])


def leave_one_out(n: int) -> Folds:
    """``n`` folds, fold ``i`` leaving out unit ``i``."""
    n = check_positive_int("n", n, 2)
    return Folds([np.array([i]) for i in range(n)], n)


def kfold(n: int, k: int, seed: int = 0) -> Folds:
    """Partition a random permutation of ``0..n-1`` into ``k`` folds of near-equal size."""
    n = check_positive_int("n", n, 2)
    k = check_positive_int("k", k, 2)
    if k > n:
        raise InvalidArgumentError(f"`k`={k} exceeds the number of units n={n}")
    perm = np.random.default_rng(seed).permutation(n)
    return Folds(np.array_split(perm, k), n)


def hblock(n: int, k: int, h: int) -> Folds:
    """h-block cross-validation (Burman, Chow & Nolan, 1994): the units ``0..n-1`` split
    in order into ``k`` contiguous blocks of near-equal size; fold ``i`` scores block ``i``
    and removes it with a buffer of ``h`` units on each side (clipped at the ends), so that
    the units next to the scored block, which carry information about it through the
    dependence, do not train the fold's fit.

    Raises:
        InvalidArgumentError: ``k`` exceeds ``n``, or ``h`` is negative.
        FoldRemovesAllError: a block with its buffers covers every unit (``k = 1``, or ``h``
            too large for the blocks).
    """
    n = check_positive_int("n", n, 2)
    k = check_positive_int("k", k)
    h = check_positive_int("h", h, 0)
    if k > n:
        raise InvalidArgumentError(f"`k`={k} exceeds the number of units n={n}")
    blocks = np.array_split(np.arange(n), k)
    removed = [np.arange(max(b[0] - h, 0), min(b[-1] + h + 1, n)) for b in blocks]
    full = [i for i, r in enumerate(removed) if r.size == n]
    if full:
        raise FoldRemovesAllError(
            f"block {full[0]} of `hblock(n={n}, k={k}, h={h})` with its buffer of {h} units "
            "each side removes every unit; use more blocks (k) or a smaller buffer (h)")
    return Folds(removed, n, scored=blocks)


def neighbourhood(adjacency, radius: int = 1, centres=None, buffer: int = 0) -> Folds:
    """Spatial blocks: fold ``i`` leaves out site ``centres[i]`` with every site within
    ``radius`` steps of it in the graph (``radius=0``: the site alone, leave-one-site-out).
    With ``buffer=b`` it also removes the sites within ``radius + b`` steps from training
    but scores only those within ``radius`` (spatial h-block CV: the buffer's sites,
    dependent on the block, neither train nor are scored).

    Parameters
    ----------
    adjacency : (n, n) 0/1 array
        Symmetric, no self-loops (isolated sites are allowed: their block is the site).
    radius : int, default 1
        Graph distance of the block around each centre.
    centres : sequence of int, optional
        The centre of each fold; default every site ``0..n-1``.
    buffer : int, default 0
        Graph distance beyond ``radius`` of the sites removed but not scored.

    Raises
    ------
    FoldRemovesAllError
        A centre's block with its buffer removes every site.
    """
    adj = check_adjacency("adjacency", adjacency, isolated=True)
    radius = check_positive_int("radius", radius, 0)
    buffer = check_positive_int("buffer", buffer, 0)
    n = adj.shape[0]
    centres = np.arange(n) if centres is None else np.atleast_1d(np.asarray(centres))
    if centres.dtype.kind not in "iu" or centres.size == 0:
        raise FoldIndexError("`centres` must be a non-empty sequence of integer sites")
    if centres.min() < 0 or centres.max() >= n:
        raise FoldIndexError(f"`centres` must lie in [0, {n}), got {centres.min()}.."
                             f"{centres.max()}")
    reach = np.eye(n, dtype=bool)[centres]
    for _ in range(radius):
        reach = reach | ((reach.astype(np.int64) @ adj) > 0)
    if not buffer:
        return Folds([np.flatnonzero(r) for r in reach], n)
    removed = reach
    for _ in range(buffer):
        removed = removed | ((removed.astype(np.int64) @ adj) > 0)
    full = np.flatnonzero(removed.all(axis=1))
    if full.size:
        raise FoldRemovesAllError(
            f"the block of centre {int(centres[full[0]])} (radius {radius}) with its buffer "
            f"of {buffer} removes every one of the {n} sites; use a smaller `buffer` or "
            "`radius`")
    return Folds([np.flatnonzero(r) for r in removed], n,
                 scored=[np.flatnonzero(r) for r in reach])
