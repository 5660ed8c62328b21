"""Named-entity recognition data and metric (CoNLL-2003): the reader, word-to-subword
alignment and entity-level F1.

Files hold one `token TAG` pair per line (one space), a blank line between sentences, BIO
tags over PER, ORG, LOC and MISC. An I- tag with no B- before it opens an entity (the
CoNLL-2003 files have such spans); `-DOCSTART-` lines are document markers, skipped.

Entities are scored as conlleval does: a predicted entity counts only when its type and
its exact word span match a gold one (micro precision, recall and F1 over all entities,
and F1 per type); token accuracy is reported beside it.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator, Sequence

from .errors import UserError

ENTITY_TYPES = ("PER", "ORG", "LOC", "MISC")
TAGS = ("O", *(f"{p}-{t}" for t in ENTITY_TYPES for p in ("B", "I")))  # class id = index
TAG_ID = {t: i for i, t in enumerate(TAGS)}
IGNORE = -100  # label of subword pieces after a word's first, and of special tokens


class NerDataError(UserError):
    """A CoNLL file is missing or malformed; the message names the file and line."""


@dataclass(frozen=True)
class Sentence:
    words: tuple[str, ...]
    tags: tuple[int, ...]  # TAGS ids, one per word


def read_conll(path: str | Path) -> Iterator[Sentence]:
    """Stream sentences from a `token TAG` file, validating every line (bounded memory)."""
    path = Path(path)
    if not path.is_file():
        raise NerDataError(f"{path}: file not found. A CoNLL-format directory holds train.txt and dev.txt "
                           "(`token TAG` per line, a blank line between sentences)")
    words: list[str] = []
    tags: list[int] = []
    with open(path, encoding="utf-8-sig") as f:
        for lineno, line in enumerate(f, 1):
            line = line.rstrip("\r\n")
            if not line.strip():
                if words:
                    yield Sentence(tuple(words), tuple(tags))
                    words, tags = [], []
                continue
            fields = line.split(" ")
            if fields[0] == "-DOCSTART-":
                continue
            if len(fields) != 2 or not all(fields):
                raise NerDataError(f"{path}:{lineno}: expected 'token TAG' (two fields separated by one "
                                   f"space), got {len(fields)} field(s): {line[:80]!r}")
            if fields[1] not in TAG_ID:
                raise NerDataError(f"{path}:{lineno}: unknown tag {fields[1]!r}; tags are {', '.join(TAGS)}")
            words.append(fields[0])
            tags.append(TAG_ID[fields[1]])
    if words:
        yield Sentence(tuple(words), tuple(tags))


def entities(tags: Sequence[str | int]) -> set[tuple[str, int, int]]:
    """(type, first word, last word + 1) of every entity in a BIO sequence, conlleval's way:
    an entity starts at B-X, or at I-X after O or after another type; it ends before O,
    B-, or an I- of another type."""
    out, start, kind = set(), None, None
    names = [TAGS[t] if isinstance(t, int) else t for t in tags]
    for i, tag in enumerate([*names, "O"]):
        prefix, _, typ = tag.partition("-")
        ends = kind is not None and (prefix in ("O", "B") or typ != kind)
        if ends:
            out.add((kind, start, i))
            start, kind = None, None
        if prefix == "B" or (prefix == "I" and kind is None):
            start, kind = i, typ
    return out


def entity_metrics(gold: Iterable[Sequence[int]], pred: Iterable[Sequence[int]]) -> dict:
    """Micro entity F1 (exact span and type), precision, recall, F1 per type and token
    accuracy over sentences of TAGS ids (pred may be shorter: truncated words count as O)."""
    tp, n_gold, n_pred = Counter(), Counter(), Counter()
    right = total = 0
    for g, p in zip(gold, pred, strict=True):
        p = list(p) + [TAG_ID["O"]] * (len(g) - len(p))
        ge, pe = entities(g), entities(p)
        for kind, *_ in ge:
            n_gold[kind] += 1
        for kind, *_ in pe:
            n_pred[kind] += 1
        for kind, *_ in ge & pe:
            tp[kind] += 1
        right += sum(a == b for a, b in zip(g, p))
        total += len(g)

    def prf(t, ng, np_):
        prec = t / np_ if np_ else 0.0
        rec = t / ng if ng else 0.0
        return prec, rec, (2 * prec * rec / (prec + rec) if prec + rec else 0.0)

    prec, rec, f1 = prf(sum(tp.values()), sum(n_gold.values()), sum(n_pred.values()))
    return {"f1": f1, "precision": prec, "recall": rec,
            "f1_per_type": {k: prf(tp[k], n_gold[k], n_pred[k])[2] for k in ENTITY_TYPES},
            "token_accuracy": right / total if total else 0.0, "entities": sum(n_gold.values())}


def card_counts(sentences: Iterable[Sentence]) -> dict:
    """Data card figures of a split: sentences, tokens, entities per type."""
    n_sent = n_tok = 0
    per_type: Counter = Counter()
    for s in sentences:
        n_sent += 1
        n_tok += len(s.words)
        per_type.update(kind for kind, *_ in entities(s.tags))
    return {"sentences": n_sent, "tokens": n_tok, "entities": {k: per_type[k] for k in ENTITY_TYPES}}


@dataclass
class Aligned:
    input_ids: list[int]
    labels: list[int]  # the word's tag on its first piece, IGNORE elsewhere
    words_kept: int  # words that fit max_length (the rest were cut at a word boundary)


def align(tokenizer, sentence: Sentence, max_length: int) -> Aligned:
    """Subword pieces of a sentence with each word's tag on its first piece. Truncation
    cuts between words, never inside one: a word is kept with all its pieces or dropped."""
    enc = tokenizer(list(sentence.words), is_split_into_words=True, add_special_tokens=False)
    word_ids = enc.word_ids()
    ids = enc["input_ids"]
    budget = max_length - 2  # [CLS] and [SEP]
    cut = len(ids)
    if cut > budget:
        cut = budget
        while cut > 0 and word_ids[cut] == word_ids[cut - 1]:  # back to the start of that word
            cut -= 1
    kept_words = (word_ids[cut - 1] + 1) if cut else 0
    labels, prev = [], None
    for w in word_ids[:cut]:
        labels.append(sentence.tags[w] if w != prev else IGNORE)
        prev = w
    return Aligned(input_ids=[tokenizer.cls_token_id, *ids[:cut], tokenizer.sep_token_id],
                   labels=[IGNORE, *labels, IGNORE],
                   words_kept=kept_words)


# --- entities in raw text (compress predict) ------------------------------------------------

def words_with_spans(tokenizer, text: str) -> list[tuple[str, int, int]]:
    """Split raw text into words the way the model's tokenizer pre-splits it (whitespace
    and punctuation for BERT), with character spans: (word, start, end)."""
    pre = tokenizer.backend_tokenizer.pre_tokenizer.pre_tokenize_str(text)
    return [(w, a, b) for w, (a, b) in pre]


def entities_in_text(text: str, words: list[tuple[str, int, int]], word_tags: Sequence[int]) -> list[dict]:
    """Entities predicted over `words` (from words_with_spans) as character spans of text."""
    out = []
    for kind, first, last in sorted(entities(word_tags), key=lambda e: e[1]):
        start, end = words[first][1], words[last - 1][2]
        out.append({"type": kind, "start": start, "end": end, "text": text[start:end]})
    return out
