"""NER data and metric (issue 14, first part): the CoNLL reader with file:line errors, the
conlleval entity rules, entity F1 on hand-made cases, word-to-subword alignment and
truncation at word boundaries, and the real CoNLL-2003 files' card figures."""
import pytest

from compress.ner import (IGNORE, TAG_ID, TAGS, NerDataError, Sentence, align, card_counts, entities,
                          entity_metrics, read_conll, word_predictions)
from conftest import SHARED_DATA, tiny_model


def _ids(*tags):
    return tuple(TAG_ID[t] for t in tags)


def test_reader_streams_sentences_and_names_bad_lines(tmp_path):
    f = tmp_path / "train.txt"
    f.write_text("-DOCSTART- O\n\nEU B-ORG\nrejects O\nGerman B-MISC\n\nPeter I-PER\nBlackburn I-PER\n")
    sents = list(read_conll(f))
    assert [s.words for s in sents] == [("EU", "rejects", "German"), ("Peter", "Blackburn")]
    assert sents[1].tags == _ids("I-PER", "I-PER")  # an I- with no B- before it is valid
    bad = tmp_path / "bad.txt"
    bad.write_text("EU B-ORG\nrejects O extra\n")
    with pytest.raises(NerDataError, match=r"bad.txt:2: expected 'token TAG'.*3 field"):
        list(read_conll(bad))
    bad.write_text("EU B-ORG\n\nrejects B-FOOD\n")
    with pytest.raises(NerDataError, match=r"bad.txt:3: unknown tag 'B-FOOD'"):
        list(read_conll(bad))
    with pytest.raises(NerDataError, match="missing.txt: file not found"):
        list(read_conll(tmp_path / "missing.txt"))


def test_entities_follow_conlleval():
    assert entities(["B-PER", "I-PER", "O", "B-LOC"]) == {("PER", 0, 2), ("LOC", 3, 4)}
    assert entities(["I-ORG", "I-ORG", "O"]) == {("ORG", 0, 2)}  # I- after O opens an entity
    assert entities(["B-PER", "B-PER"]) == {("PER", 0, 1), ("PER", 1, 2)}  # B- splits
    assert entities(["B-PER", "I-LOC"]) == {("PER", 0, 1), ("LOC", 1, 2)}  # type change splits
    assert entities(["O", "O"]) == set()


def test_entity_f1_exact_span_and_type():
    gold = [_ids("B-PER", "I-PER", "O", "B-LOC"), _ids("B-ORG", "O")]
    assert entity_metrics(gold, gold)["f1"] == 1.0
    # one span too short (PER wrong), LOC right, ORG typed MISC (wrong), no extra
    pred = [_ids("B-PER", "O", "O", "B-LOC"), _ids("B-MISC", "O")]
    m = entity_metrics(gold, pred)
    assert m["precision"] == pytest.approx(1 / 3) and m["recall"] == pytest.approx(1 / 3)
    assert m["f1"] == pytest.approx(1 / 3)
    assert m["f1_per_type"]["LOC"] == 1.0 and m["f1_per_type"]["PER"] == 0.0 and m["f1_per_type"]["ORG"] == 0.0
    assert m["token_accuracy"] == pytest.approx(4 / 6)
    # a truncated prediction counts the missing words as O: the LOC entity is missed
    short = entity_metrics([_ids("B-PER", "O", "B-LOC")], [_ids("B-PER", "O")])
    assert short["recall"] == 0.5 and short["precision"] == 1.0


def test_alignment_puts_each_label_on_the_first_piece():
    _, tok = tiny_model()
    s = Sentence(("Huggingface", "rejects", "Blackburn"), _ids("B-ORG", "O", "B-PER"))
    a = align(tok, s, 128)
    pieces = tok.convert_ids_to_tokens(a.input_ids)
    assert pieces[0] == "[CLS]" and pieces[-1] == "[SEP]"
    n_first = len(tok.tokenize("Huggingface"))
    assert n_first > 1  # the case under test: a word split into several pieces
    assert a.labels[1] == TAG_ID["B-ORG"] and a.labels[2:1 + n_first] == [IGNORE] * (n_first - 1)
    assert [l for l in a.labels if l != IGNORE] == list(s.tags)
    assert word_predictions([TAG_ID["O"]] + [TAG_ID["B-ORG"]] * (len(a.input_ids) - 1), a) == \
        [TAG_ID["B-ORG"]] * 3


def test_truncation_cuts_at_a_word_boundary():
    _, tok = tiny_model()
    words = ("Huggingface",) * 6
    s = Sentence(words, _ids(*["B-ORG"] * 6))
    per_word = len(tok.tokenize("Huggingface"))
    budget = 2 * per_word + 1  # room for two whole words and one piece of the third
    a = align(tok, s, budget + 2)
    assert a.words_kept == 2 and len(a.input_ids) == 2 * per_word + 2
    assert [l for l in a.labels if l != IGNORE] == list(s.tags[:2])
    assert a.word_of_piece[-2] == 1  # the last piece kept ends word 1; word 2 is not split


def test_real_conll2003_dev_card():
    path = SHARED_DATA / "conll2003" / "dev.txt"
    if not path.is_file():
        pytest.skip(f"{path} is not here (the shared data beside the checkout)")
    card = card_counts(read_conll(path))
    assert card["sentences"] == 3250 and card["tokens"] > 50_000
    assert set(card["entities"]) == {"PER", "ORG", "LOC", "MISC"} and min(card["entities"].values()) > 500
    assert len(TAGS) == 9


def test_token_kd_loss_scores_first_pieces_only():
    import torch

    _, tok = tiny_model()
    sents = [Sentence(("Huggingface", "rejects", "Blackburn"), _ids("B-ORG", "O", "B-PER")),
             Sentence(("EU",), _ids("B-ORG"))]
    from compress.ner import collate_tokens, encode_sentences, first_piece_logits, token_kd_loss

    enc = encode_sentences(tok, sents, 64)
    batch, labels = collate_tokens(enc, [0, 1])
    labels = torch.from_numpy(labels)
    assert int((labels != IGNORE).sum()) == 4  # one scored position per word
    student = torch.randn(*labels.shape, len(TAGS))
    teacher = student.clone()
    # the student equal to the teacher on scored positions: no soft loss, whatever elsewhere
    teacher[labels == IGNORE] += 5.0
    loss_soft = token_kd_loss(student, first_piece_logits(teacher, labels), labels, 2.0, 1.0)
    assert abs(float(loss_soft)) < 1e-5
    # the hard term is plain CE over the 4 scored positions
    hard = token_kd_loss(student, first_piece_logits(teacher, labels), labels, 2.0, 0.0)
    ref = torch.nn.functional.cross_entropy(student[labels != IGNORE], labels[labels != IGNORE])
    assert torch.allclose(hard, ref)


def test_entities_in_raw_text_have_character_spans():
    from compress.ner import entities_in_text, words_with_spans

    _, tok = tiny_model()
    text = "Peter Blackburn met the EU, in Brussels."
    words = words_with_spans(tok, text)
    assert [w for w, *_ in words] == ["Peter", "Blackburn", "met", "the", "EU", ",", "in", "Brussels", "."]
    tags = _ids("B-PER", "I-PER", "O", "O", "B-ORG", "O", "O", "B-LOC", "O")
    found = entities_in_text(text, words, tags)
    assert found == [{"type": "PER", "start": 0, "end": 15, "text": "Peter Blackburn"},
                     {"type": "ORG", "start": 24, "end": 26, "text": "EU"},
                     {"type": "LOC", "start": 31, "end": 39, "text": "Brussels"}]
