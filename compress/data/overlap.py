"""Word-for-word containment between the texts of a training file: which rows repeat, or
sit inside, another row's text, and which rows sit inside a given set of rows.

Why: a validation split is only a fair judge of what it was held out from if none of its
texts was fitted on. SST-2's training file holds every phrase of each parsed sentence
beside the sentence (67,349 rows from ~6,900 sentences): a plain random carve draws
mostly fragments whose sentence stays in train (89% of 2,000 rows, against 0.2% of dev),
and every choice made on it sees a teacher at ~95% where dev says ~90%. prepare's
disjoint carve draws validation only from rows no other row repeats or contains, then
drops from train every row whose text sits inside a drawn one.

Texts are compared lower-cased, as whitespace-separated words; each word sequence is a
64-bit polynomial hash of word ids, so a text of n words has n(n+1)/2 windows to look up
(SST-2: about 5 s with the passes that read the file). A row of several texts (a pair) is
inside another row when any of its texts is.
"""
from __future__ import annotations

from typing import Iterable, Iterator, Sequence

MASK = (1 << 64) - 1
BASE = 0x9E3779B97F4A7C15  # odd 64-bit multiplier (the golden-ratio constant)
SHARED = -1  # a text more than one row holds


class Vocab:
    """Word -> small int, grown as texts are read (ids start at 1: 0 never hashes)."""

    def __init__(self):
        self.ids: dict[str, int] = {}

    def encode(self, text: str) -> list[int]:
        ids = self.ids
        return [ids.setdefault(w, len(ids) + 1) for w in text.lower().split()]


def full_hash(ids: Sequence[int]) -> int:
    h = 0
    for t in ids:
        h = (h * BASE + t) & MASK
    return h


def windows(ids: Sequence[int]) -> Iterator[int]:
    """The hash of every contiguous run of words shorter than the whole text."""
    n = len(ids)
    for i in range(n):
        h = 0
        for j in range(i, n if i else n - 1):  # from word 0, stop one short: not the text itself
            h = (h * BASE + ids[j]) & MASK
            yield h


class TextIndex:
    """The full texts of the training rows: hash -> the row holding it (SHARED when two do)."""

    def __init__(self, rows: Iterable[Sequence[str]]):
        self.vocab = Vocab()
        self.row_of: dict[int, int] = {}
        self.repeated: set[int] = set()  # rows whose text another row also holds
        self.rows = 0
        for i, texts in enumerate(rows):
            self.rows = i + 1
            for text in texts:
                h = full_hash(self.vocab.encode(text))
                prev = self.row_of.setdefault(h, i)
                if prev != i:
                    if prev != SHARED:
                        self.repeated.add(prev)
                    self.repeated.add(i)
                    self.row_of[h] = SHARED

    def inside_another(self, rows: Iterable[Sequence[str]]) -> bytearray:
        """One byte a row (rows in the order the index read them): 1 when the row's text is
        repeated by another row or sits word for word inside another row's text."""
        flags = bytearray(self.rows)
        for i in self.repeated:
            flags[i] = 1
        for i, texts in enumerate(rows):
            for text in texts:
                for h in windows(self.vocab.encode(text)):
                    j = self.row_of.get(h)
                    if j is not None and j != SHARED and j != i:
                        flags[j] = 1
        return flags


def sub_windows(rows: Iterable[Sequence[str]], vocab: Vocab) -> set[int]:
    """The hashes of every run of words inside the given rows' texts (the texts included)."""
    out: set[int] = set()
    for texts in rows:
        for text in texts:
            ids = vocab.encode(text)
            out.update(windows(ids))
            out.add(full_hash(ids))
    return out


def inside(rows: Iterable[Sequence[str]], spans: set[int], vocab: Vocab) -> Iterator[bool]:
    """Per row: whether any of its texts is one of `spans` (sub_windows of other rows)."""
    for texts in rows:
        yield any(full_hash(vocab.encode(t)) in spans for t in texts)
