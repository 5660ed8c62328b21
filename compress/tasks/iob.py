"""Entity spans and entity-level F1 over BIO tags of any entity types, word-to-subword
alignment, and entities in raw text.

Tags are `O` or `<prefix>-<type>` with prefix `B` or `I`: IOB2 (every entity opens with
B-) and IOB1 (an I- after O opens an entity; B- only splits two adjacent entities of one
type) are both read. Any other scheme (BIOES/IOBES, BILOU, bare types) is refused by
`check_tags`, naming the scheme it saw. A task's tag set is its label list
(compress.tasks.Task.labels), read from the training split.

Entities are scored as conlleval does: a predicted entity counts only when its type and
its exact word span match a gold one (micro precision, recall and F1 over all entities,
and F1 per type); token accuracy is reported beside it.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Iterable, Sequence

from compress.core.errors import DataError

IGNORE = -100  # label of subword pieces after a word's first, and of special tokens
OUTSIDE = "O"


@dataclass(frozen=True)
class Sentence:
    words: tuple[str, ...]
    tags: tuple[int, ...]  # class ids (index into the task's tag list), one per word


def entity_types(tag_names: Sequence[str]) -> tuple[str, ...]:
    """The entity types of a tag set, sorted."""
    return tuple(sorted({t.partition("-")[2] for t in tag_names if t != OUTSIDE}))


def default_tag_order(types: Iterable[str]) -> list[str]:
    """O, then B-X, I-X for each entity type X in sorted order."""
    return [OUTSIDE, *(f"{p}-{t}" for t in sorted(set(types)) for p in ("B", "I"))]


def check_tags(tags: Iterable[str], where: str) -> None:
    """Refuse tags outside the IOB schemes, naming the scheme they look like."""
    bad = sorted({t for t in tags if t != OUTSIDE and (t[:2] not in ("B-", "I-") or len(t) < 3)})
    if not bad:
        return
    prefixes = {t.partition("-")[0] for t in bad if "-" in t}
    if prefixes & {"E", "S"}:
        seen = "BIOES/IOBES (E-, S- prefixes)"
    elif prefixes & {"L", "U"}:
        seen = "BILOU (L-, U- prefixes)"
    else:
        seen = "tags without a B-/I- prefix"
    raise DataError(f"{where}: tags {bad[:6]} look like {seen}; the pipeline reads IOB1 or IOB2 tags "
                    "(O, B-<type>, I-<type>): convert the file (S-X -> B-X, E-X -> I-X)")


def tag_scheme(sentences_tags: Iterable[Sequence[str]]) -> str:
    """IOB2 when every entity opens with B-, else IOB1."""
    for tags in sentences_tags:
        prev = OUTSIDE
        for t in tags:
            if t.startswith("I-") and (prev == OUTSIDE or prev.partition("-")[2] != t[2:]):
                return "IOB1"
            prev = t
    return "IOB2"


def entities(tags: Sequence[str]) -> set[tuple[str, int, int]]:
    """(type, first word, last word + 1) of every entity in a BIO sequence of tag names,
    conlleval's way: an entity starts at B-X, or at I-X after O or after another type; it
    ends before O, B-, or an I- of another type."""
    out, start, kind = set(), None, None
    for i, tag in enumerate([*tags, OUTSIDE]):
        prefix, _, typ = tag.partition("-")
        ends = kind is not None and (prefix in (OUTSIDE, "B") or typ != kind)
        if ends:
            out.add((kind, start, i))
            start, kind = None, None
        if prefix == "B" or (prefix == "I" and kind is None):
            start, kind = i, typ
    return out


def _names(ids: Sequence[int], tag_names: Sequence[str], length: int) -> list[str]:
    """Tag names of `ids`, padded with O to `length` (words cut by truncation count as O)."""
    return [tag_names[t] for t in ids] + [OUTSIDE] * (length - len(ids))


def entity_metrics(gold: Iterable[Sequence[int]], pred: Iterable[Sequence[int]], tag_names: Sequence[str]) -> dict:
    """Micro entity F1 (exact span and type), precision, recall, F1 per type and token
    accuracy over sentences of tag ids into `tag_names` (pred may be shorter: truncated
    words count as O)."""
    tp, n_gold, n_pred = Counter(), Counter(), Counter()
    right = total = 0
    for g, p in zip(gold, pred, strict=True):
        gn, pn = _names(g, tag_names, len(g)), _names(p, tag_names, len(g))
        ge, pe = entities(gn), entities(pn)
        for kind, *_ in ge:
            n_gold[kind] += 1
        for kind, *_ in pe:
            n_pred[kind] += 1
        for kind, *_ in ge & pe:
            tp[kind] += 1
        right += sum(a == b for a, b in zip(gn, pn))
        total += len(g)

    def prf(t, ng, np_):
        prec = t / np_ if np_ else 0.0
        rec = t / ng if ng else 0.0
        return prec, rec, (2 * prec * rec / (prec + rec) if prec + rec else 0.0)

    prec, rec, f1 = prf(sum(tp.values()), sum(n_gold.values()), sum(n_pred.values()))
    return {"f1": f1, "precision": prec, "recall": rec,
            "f1_per_type": {k: prf(tp[k], n_gold[k], n_pred[k])[2] for k in entity_types(tag_names)},
            "token_accuracy": right / total if total else 0.0, "entities": sum(n_gold.values())}


def entity_counts(gold: Sequence[int], pred: Sequence[int], tag_names: Sequence[str]) -> tuple[int, int, int]:
    """(true positive, gold, predicted) entities of one sentence (pred may be shorter)."""
    ge = entities(_names(gold, tag_names, len(gold)))
    pe = entities(_names(pred, tag_names, len(gold)))
    return len(ge & pe), len(ge), len(pe)


def card_counts(sentences: Iterable[Sentence], tag_names: Sequence[str]) -> dict:
    """Data card figures of a split: sentences, tokens, entities per type."""
    n_sent = n_tok = 0
    per_type: Counter = Counter()
    for s in sentences:
        n_sent += 1
        n_tok += len(s.words)
        per_type.update(kind for kind, *_ in entities([tag_names[t] for t in s.tags]))
    return {"sentences": n_sent, "tokens": n_tok, "entities": {k: per_type[k] for k in entity_types(tag_names)}}


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


def entities_in_text(text: str, words: list[tuple[str, int, int]], word_tags: Sequence[str]) -> list[dict]:
    """Entities predicted over `words` (from words_with_spans; one tag name per word) as
    character spans of text."""
    out = []
    for kind, first, last in sorted(entities(word_tags), key=lambda e: e[1]):
        start, end = words[first][1], words[last - 1][2]
        out.append({"type": kind, "start": start, "end": end, "text": text[start:end]})
    return out
