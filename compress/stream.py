"""Run a loaded artifact over a stream of texts: labels and probabilities for a
classifier, entities with character spans for a tagger. `compress predict` prints these,
and the measurement harness times them over the dev split (dev_stream_seq_per_s), so the
figure is that of what users run. Kept apart from compress.predict (artifact loading,
hashes, task detection) so that measuring depends on this code only."""
from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Iterable, Iterator

import numpy as np

from compress.data.prepare import Example
from compress.core.errors import UserError


@dataclass
class Loaded:
    runner: object
    task: object
    label_names: list[str]
    meta: dict | None


def _chunks(items: Iterable, size: int) -> Iterator[list]:
    part = []
    for x in items:
        part.append(x)
        if len(part) == size:
            yield part
            part = []
    if part:
        yield part


def predict_stream(loaded: Loaded, examples: Iterable[Example], batch_size: int = 32, max_length: int = 128,
                   progress: bool = False, total: int | None = None) -> Iterator[dict]:
    """Label and probabilities for each example, in input order, as they are computed.

    Reads `examples` lazily in chunks of 4096, so an input file of any length is never
    held in memory, nor are its token ids or results. Texts longer than `max_length`
    tokens are truncated by the tokenizer. Raises UserError when there is no input."""
    from tqdm.auto import tqdm

    bar = tqdm(total=total, desc="predict", unit="text", disable=not progress, file=sys.stderr)
    seen = 0
    for part in _chunks(examples, 4096):
        yield from loaded.task.kind_impl.predict(loaded, part, batch_size, max_length, progress=bar.update)
        seen += len(part)
    bar.close()
    if not seen:
        raise UserError("no input texts: give texts as arguments, --file FILE, or lines on standard input")


def classify_rows(loaded: Loaded, examples: list[Example], batch_size: int, max_length: int,
                  progress=None) -> list[dict]:
    """Label and probability of every label for each row (a text or a text pair);
    `progress(n)` is called as each batch of n rows is done."""
    from compress.data.tokens import collate, encode, eval_batches

    enc = encode(loaded.runner.tokenizer, examples, max_length)  # longer texts are truncated
    logits = np.zeros((len(examples), loaded.runner.num_labels), dtype=np.float32)
    for idx in eval_batches(enc.lengths(), batch_size):
        logits[idx] = loaded.runner(collate(enc, idx))
        if progress is not None:
            progress(len(idx))
    z = logits - logits.max(axis=1, keepdims=True)
    probs = np.exp(z) / np.exp(z).sum(axis=1, keepdims=True)
    return [{"text": ex.text_a if ex.text_b is None else [ex.text_a, ex.text_b],
             "label": loaded.label_names[int(p.argmax())],
             "probabilities": {n: round(float(v), 6) for n, v in zip(loaded.label_names, p)}}
            for ex, p in zip(examples, probs)]


def tag_texts(loaded: Loaded, texts: list[str], batch_size: int, max_length: int) -> list[dict]:
    """Entities in each text: the tokenizer's words (with character spans), a tag per word
    from its first piece, BIO spans (conlleval rules) as character spans of the text.
    `score`: the smallest probability the model gave to the tags of the entity's words.
    Words cut by max_length are tagged O."""
    from compress.tasks.iob import OUTSIDE, Sentence, entities_in_text, words_with_spans
    from compress.data.tokens import encode, eval_batches, position_logits

    tok = loaded.runner.tokenizer
    spans = [words_with_spans(tok, t) for t in texts]
    sents = [Sentence(tuple(w for w, *_ in s), (0,) * len(s)) for s in spans]
    keep = [i for i, s in enumerate(sents) if s.words]  # a text of spaces only has no words
    enc = encode(tok, [sents[i] for i in keep], max_length)
    batches = eval_batches(enc.lengths(), batch_size) if keep else []
    logits = position_logits(enc, batches, loaded.runner, loaded.runner.num_labels)
    z = np.exp(logits - logits.max(axis=1, keepdims=True))
    probs = z / z.sum(axis=1, keepdims=True)
    out = [{"text": t, "entities": []} for t in texts]
    for row, i in enumerate(keep):
        p = probs[enc.offsets[row]:enc.offsets[row + 1]]
        tags = p.argmax(-1).tolist()
        names = [loaded.task.labels[t] for t in tags]  # words cut by max_length: O
        found = entities_in_text(texts[i], spans[i], names + [OUTSIDE] * (len(spans[i]) - len(tags)))
        for e in found:
            first = next(k for k, (_, a, _) in enumerate(spans[i]) if a == e["start"])
            last = next(k for k, (_, _, b) in enumerate(spans[i]) if b == e["end"])
            scores = [float(p[k, tags[k]]) for k in range(first, min(last + 1, len(tags)))]
            e["score"] = round(min(scores), 6) if scores else 0.0
        out[i]["entities"] = found
    return out
