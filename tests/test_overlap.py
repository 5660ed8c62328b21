"""The disjoint validation carve (prepare.validation_disjoint_text): validation holds only
texts no training row repeats or contains, and the training rows inside a drawn text are
dropped, for one text, for pairs and for tagged sentences; a file where nothing can be
held out is refused naming the key."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from compress.data import overlap
from compress.data.prepare import DataError, Prepared, prepare, read_split
from conftest import SHARED_DATA, preset, write_tsv


def phrases(sentence: str) -> list[str]:
    """The sentence and two of its phrases, as SST-2's training file holds them."""
    words = sentence.split()
    return [sentence, " ".join(words[1:]), " ".join(words[: len(words) // 2])]


def words(text: str) -> str:
    return " " + " ".join(text.lower().split()) + " "


def test_the_index_finds_repeats_and_word_aligned_containment():
    rows = [("A warm , funny film",), ("warm , funny",), ("a cold film",), ("warm",), ("a cold film",),
            ("arm",), ("x y", "the film is x y z")]
    index = overlap.TextIndex(rows)
    flags = index.inside_another(rows)
    # 1 and 3 sit inside 0 (case ignored); 2 and 4 repeat each other; "arm" is inside no word
    # sequence ("warm" is a whole word); row 6's own texts do not count against it
    assert list(flags) == [0, 1, 1, 1, 1, 0, 0]
    spans = overlap.sub_windows([rows[0]], index.vocab)
    assert list(overlap.inside(rows, spans, index.vocab)) == [True, True, False, True, False, False, False]


def test_validation_texts_are_in_no_training_row_and_their_phrases_leave_train(tmp_path):
    positive = ["a warm and funny film about two old friends", "one of the best films of the year so far",
                "an utterly charming and hilarious comedy", "the cast is wonderful and the story moving",
                "a smart , tender and beautifully acted drama", "it will make you laugh and cry at once"]
    negative = ["the movie is a disaster from start to finish", "dull , lifeless and very poorly acted",
                "i hated every single minute of this film", "boring , far too long and badly written",
                "the plot makes no sense at all", "a waste of a good cast and two hours"]
    rows = [[p, label] for label, group in (("1", positive), ("0", negative)) for s in group for p in phrases(s)]
    rows += [["the movie is a disaster from start to finish", "0"]]  # a repeat: never drawn
    src = tmp_path / "src"
    write_tsv(src / "train.tsv", ["sentence", "label"], rows)
    write_tsv(src / "dev.tsv", ["sentence", "label"], [[positive[0], "1"], [negative[0], "0"]])
    card = prepare(preset("sst2", src, validation_fraction=0.2, validation_disjoint_text=True), tmp_path / "p")

    prepared = Prepared.open(tmp_path / "p")
    train = [ex.text_a for ex in prepared.split("train")]
    val = [ex.text_a for ex in prepared.validation()]
    facts = card["validation_carved"]["disjoint_text"]
    # candidates: the 12 sentences less the repeated one; 20% of 5 or 6 per label
    assert facts["candidates"] == 11 and facts["rows_inside_another"] == 26
    assert len(val) == 2 and {ex.label for ex in prepared.validation()} == {0, 1}
    assert set(val) <= set(positive + negative)
    assert not any(words(v) in words(t) for v in val for t in train)
    assert not any(words(t) in words(v) for v in val for t in train)
    assert facts["train_rows_dropped"] == 2 * 2 and len(train) == len(rows) - 2 - 4
    # the draw is the seed's: again, the same rows
    again = prepare(preset("sst2", src, validation_fraction=0.2, validation_disjoint_text=True), tmp_path / "q")
    assert again["validation_carved"]["row_ids_sha256"] == card["validation_carved"]["row_ids_sha256"]


def test_pairs_and_sentences_are_compared_text_by_text(tmp_path, conll_prepared):
    from compress.tasks.base import Example, get_kind
    from compress.tasks.iob import Sentence

    assert get_kind("pair_classification").texts(Example("a b", "c d", 0)) == ("a b", "c d")
    assert get_kind("classification").texts(Example("a b", None, 0)) == ("a b",)
    assert get_kind("token_classification").texts(Sentence(("EU", "rejects"), (0, 0))) == ("EU rejects",)
    # the CoNLL fixture repeats its 4 sentences 8 times: nothing can be held out, and the error says how
    src = conll_prepared.parent / "src"
    with pytest.raises(DataError, match=r"train\.txt: no validation row can be held out with "
                                        r"prepare\.validation_disjoint_text.*set it to false"):
        prepare(preset("conll2003", src, validation_disjoint_text=True), tmp_path / "p")
    assert not (tmp_path / "p").exists()  # nothing half-written


def test_on_the_real_mrpc_pairs_no_validation_sentence_is_in_train(tmp_path):
    src = SHARED_DATA / "mrpc"
    if not (src / "train.tsv").is_file():
        pytest.skip(f"{src} is not here (the shared data beside the checkout)")
    card = prepare(preset("mrpc", src, validation_disjoint_text=True), tmp_path / "p")
    prepared = Prepared.open(tmp_path / "p")
    train = {words(t) for ex in prepared.split("train") for t in (ex.text_a, ex.text_b)}
    val = [words(t) for ex in prepared.validation() for t in (ex.text_a, ex.text_b)]
    assert card["validation_carved"]["rows"] == len(val) // 2 >= 300
    assert not any(v in train for v in val)
    facts = card["validation_carved"]["disjoint_text"]
    assert facts["rows_inside_another"] > 0  # MRPC repeats some sentences across pairs
    rows = json.loads(Path(tmp_path / "p" / "card.json").read_text())["splits"]
    total = sum(1 for _ in read_split(preset("mrpc", src), "train"))
    assert rows["train"]["rows"] + rows["validation"]["rows"] + facts["train_rows_dropped"] == total
