"""compress.data.tokenizer (the tokenizers-only loader of the ONNX and OpenVINO runners)
gives the ids transformers gives, on the real dev splits: single texts, pairs (with
longest_first truncation) and pre-split words."""
from __future__ import annotations

import pytest

from conftest import SHARED_DATA, tiny_model


@pytest.fixture(scope="module")
def tokenizers_pair(tmp_path_factory):
    from compress.data.tokenizer import FastTokenizer
    from compress.training.models import load_tokenizer, save_classifier

    model, tok = tiny_model()
    out = tmp_path_factory.mktemp("tok") / "m"
    save_classifier(model, tok, out, ["a", "b"])
    return load_tokenizer(out), FastTokenizer(out)


def _rows(name: str, cols: tuple[int, ...]) -> list[tuple[str, ...]]:
    path = SHARED_DATA / name / "dev.tsv"
    if not path.is_file():
        pytest.skip(f"{path} is not here (the shared data beside the checkout)")
    lines = path.read_text(encoding="utf-8-sig").splitlines()[1:]
    return [tuple(line.split("\t")[c] for c in cols) for line in lines if line.strip()]


@pytest.mark.parametrize("max_length", [16, 128])
def test_texts_and_pairs_match_transformers(tokenizers_pair, max_length):
    hf, fast = tokenizers_pair
    from compress.data.prepare import Example
    from compress.data.tokens import encode

    single = [Example(t, None, 0) for (t,) in _rows("sst2", (0,))]
    pairs = [Example(a, b, 0) for a, b in _rows("mrpc", (3, 4))]
    for examples in (single, pairs):
        a, b = encode(hf, examples, max_length), encode(fast, examples, max_length)
        assert a.input_ids == b.input_ids and a.token_type_ids == b.token_type_ids
    assert (fast.cls_token_id, fast.sep_token_id, fast.pad_token_id) == (hf.cls_token_id, hf.sep_token_id,
                                                                         hf.pad_token_id)
    assert fast.model_max_length == hf.model_max_length


def test_pre_split_words_match_transformers(tokenizers_pair):
    hf, fast = tokenizers_pair
    from compress.tasks.iob import Sentence, words_with_spans
    from compress.data.tokens import encode

    words = [line.split()[0] for line in (SHARED_DATA / "conll2003" / "dev.txt").read_text().splitlines()[:3000]
             if line.strip() and not line.startswith("-DOCSTART-")] if (SHARED_DATA / "conll2003" / "dev.txt").is_file() \
        else "EU rejects German call to boycott British lamb . Peter Blackburn".split()
    sentences = [Sentence(tuple(words[i:i + 23]), (0,) * len(words[i:i + 23])) for i in range(0, len(words), 23)]
    a, b = encode(hf, sentences, 32), encode(fast, sentences, 32)
    assert a.input_ids == b.input_ids and a.labels.tolist() == b.labels.tolist()
    text = "Peter Blackburn flew to Brussels, didn't he?"
    assert words_with_spans(fast, text) == words_with_spans(hf, text)
