"""NER data and metric: the conlleval entity rules over any tag set, entity F1 on
hand-made cases, word-to-subword alignment and truncation at word boundaries, and the
real CoNLL-2003 files' card figures (the CoNLL reader itself: test_formats)."""
import numpy as np
import pytest

from compress.tasks.iob import IGNORE, Sentence, align, card_counts, entities, entity_metrics
from conftest import CONLL_TAGS, CONLL_TRAIN, SHARED_DATA, preset, tiny_model

TAGS = CONLL_TAGS
TAG_ID = {t: i for i, t in enumerate(TAGS)}


def _ids(*tags):
    return tuple(TAG_ID[t] for t in tags)


def test_entities_follow_conlleval():
    assert entities(["B-PER", "I-PER", "O", "B-LOC"]) == {("PER", 0, 2), ("LOC", 3, 4)}
    assert entities(["I-ORG", "I-ORG", "O"]) == {("ORG", 0, 2)}  # I- after O opens an entity
    assert entities(["B-PER", "B-PER"]) == {("PER", 0, 1), ("PER", 1, 2)}  # B- splits
    assert entities(["B-PER", "I-LOC"]) == {("PER", 0, 1), ("LOC", 1, 2)}  # type change splits
    assert entities(["O", "O"]) == set()


def test_entity_f1_exact_span_and_type():
    gold = [_ids("B-PER", "I-PER", "O", "B-LOC"), _ids("B-ORG", "O")]
    assert entity_metrics(gold, gold, TAGS)["f1"] == 1.0
    # one span too short (PER wrong), LOC right, ORG typed MISC (wrong), no extra
    pred = [_ids("B-PER", "O", "O", "B-LOC"), _ids("B-MISC", "O")]
    m = entity_metrics(gold, pred, TAGS)
    assert m["precision"] == pytest.approx(1 / 3) and m["recall"] == pytest.approx(1 / 3)
    assert m["f1"] == pytest.approx(1 / 3)
    assert m["f1_per_type"]["LOC"] == 1.0 and m["f1_per_type"]["PER"] == 0.0 and m["f1_per_type"]["ORG"] == 0.0
    assert m["token_accuracy"] == pytest.approx(4 / 6)
    # a truncated prediction counts the missing words as O: the LOC entity is missed
    short = entity_metrics([_ids("B-PER", "O", "B-LOC")], [_ids("B-PER", "O")], TAGS)
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
    # the next word starts right after the first one's pieces
    assert a.input_ids[1 + n_first:2 + n_first] == tok(["rejects"], is_split_into_words=True,
                                                      add_special_tokens=False)["input_ids"][:1]


def test_truncation_cuts_at_a_word_boundary():
    _, tok = tiny_model()
    words = ("Huggingface",) * 6
    s = Sentence(words, _ids(*["B-ORG"] * 6))
    per_word = len(tok.tokenize("Huggingface"))
    budget = 2 * per_word + 1  # room for two whole words and one piece of the third
    a = align(tok, s, budget + 2)
    assert a.words_kept == 2 and len(a.input_ids) == 2 * per_word + 2
    assert [l for l in a.labels if l != IGNORE] == list(s.tags[:2])
    # the kept pieces are exactly the first two words' pieces: word 2 is not split
    assert a.input_ids[1:-1] == tok(list(words[:2]), is_split_into_words=True, add_special_tokens=False)["input_ids"]


def test_real_conll2003_dev_card():
    path = SHARED_DATA / "conll2003" / "dev.txt"
    if not path.is_file():
        pytest.skip(f"{path} is not here (the shared data beside the checkout)")
    from compress.data.prepare import read_split

    card = card_counts(read_split(preset("conll2003", path.parent), "dev"), TAGS)
    assert card["sentences"] == 3250 and card["tokens"] > 50_000
    assert set(card["entities"]) == {"PER", "ORG", "LOC", "MISC"} and min(card["entities"].values()) > 500
    assert len(TAGS) == 9


def test_token_kd_loss_scores_first_pieces_only():
    """Encoded scored positions of tagged sentences: one per word (its first piece); the
    distillation loss over them ignores every other piece."""
    import torch

    from compress.training.distill import kd_loss
    from compress.data.tokens import TaggedEncoded, collate, encode

    _, tok = tiny_model()
    sents = [Sentence(("Huggingface", "rejects", "Blackburn"), _ids("B-ORG", "O", "B-PER")),
             Sentence(("EU",), _ids("B-ORG"))]
    enc = encode(tok, sents, 64)
    assert isinstance(enc, TaggedEncoded) and list(enc.offsets) == [0, 3, 4] and enc.labels.tolist() == list(sents[0].tags + sents[1].tags)
    batch = collate(enc, [1, 0])
    labels = torch.from_numpy(enc.batch_labels([1, 0], batch["input_ids"].shape[1]))
    assert labels.shape == batch["input_ids"].shape and int((labels != IGNORE).sum()) == 4
    assert list(enc.positions([1, 0])) == [3, 0, 1, 2]  # row 1's word, then row 0's three
    student = torch.randn(*labels.shape, len(TAGS))
    teacher = student.clone()
    # the student equal to the teacher on scored positions: no soft loss, whatever elsewhere
    teacher[labels == IGNORE] += 5.0
    gold = torch.from_numpy(enc.labels[enc.positions([1, 0])])
    assert torch.equal(gold, labels[labels != IGNORE])
    loss_soft = kd_loss(enc.scored(student, [1, 0]), enc.scored(teacher, [1, 0]), gold, 2.0, 1.0)
    assert abs(float(loss_soft)) < 1e-5
    # the hard term is plain CE over the 4 scored positions
    hard = kd_loss(enc.scored(student, [1, 0]), enc.scored(teacher, [1, 0]), gold, 2.0, 0.0)
    ref = torch.nn.functional.cross_entropy(student[labels != IGNORE], labels[labels != IGNORE])
    assert torch.allclose(hard, ref)


def test_entities_in_raw_text_have_character_spans():
    from compress.tasks.iob import entities_in_text, words_with_spans

    _, tok = tiny_model()
    text = "Peter Blackburn met the EU, in Brussels."
    words = words_with_spans(tok, text)
    assert [w for w, *_ in words] == ["Peter", "Blackburn", "met", "the", "EU", ",", "in", "Brussels", "."]
    tags = ["B-PER", "I-PER", "O", "O", "B-ORG", "O", "O", "B-LOC", "O"]
    found = entities_in_text(text, words, tags)
    assert found == [{"type": "PER", "start": 0, "end": 15, "text": "Peter Blackburn"},
                     {"type": "ORG", "start": 24, "end": 26, "text": "EU"},
                     {"type": "LOC", "start": 31, "end": 39, "text": "Brussels"}]


# --- the tagging task through prepare, training, the teacher cache, distillation, pruning ----

def test_prepare_writes_sentences_and_an_entity_card(conll):
    root, card, prepared, _ = conll
    assert card["kind"] == "token_classification" and card["splits"]["dev"]["rows"] == 4
    assert card["splits"]["train"]["rows"] == 28 and card["splits"]["validation"]["rows"] == 4  # 32, 4 carved
    assert card["splits"]["dev"]["entities"] == {"PER": 1, "ORG": 2, "LOC": 1, "MISC": 3}
    assert card["splits"]["dev"]["tokens"] == 25 and card["splits"]["dev"]["tag_counts"]["O"] == 16
    dev = prepared.split("dev")
    assert dev[1] == Sentence(("Peter", "Blackburn"), _ids("B-PER", "I-PER"))
    assert prepared.task.token_level and prepared.task.primary_metric == "f1"


def test_prepare_names_the_bad_line_and_keeps_what_was_built(conll, tmp_path):
    from compress.data.prepare import DataError, prepare

    root, *_ = conll
    bad = tmp_path / "bad"
    bad.mkdir()
    (bad / "train.txt").write_text(CONLL_TRAIN)
    (bad / "dev.txt").write_text("EU B-ORG\nrejects B-NOPE\n")
    out = tmp_path / "prepared"
    prepare(preset("conll2003", root / "src"), out)
    before = (out / "dev.jsonl").read_bytes()
    with pytest.raises(DataError, match=r"dev.txt:2: tag 'B-NOPE' is not one of the task's tags"):
        prepare(preset("conll2003", bad), out)
    assert (out / "dev.jsonl").read_bytes() == before


def test_tagger_trains_and_is_scored_on_entities(conll):
    from compress.measure.metrics import entity_metrics_of, task_metrics
    from compress.training.models import load_saved
    from compress.data.tokens import encode
    from compress.training.train import predict_logits

    root, _, prepared, summary = conll
    assert set(summary["final_validation"]) == {"f1", "precision", "recall", "token_accuracy"}
    model, tok = load_saved(root / "teacher")
    assert type(model).__name__ == "BertForTokenClassification"
    dev = encode(tok, prepared.split("dev"), 64)
    logits = predict_logits(model, dev)
    assert logits.shape == (25, 9)  # one scored position per word
    m = task_metrics(prepared.task, dev, logits)
    val = encode(tok, prepared.validation(), 64)
    assert task_metrics(prepared.task, val, predict_logits(model, val)) == summary["final_validation"]  # the saved model
    assert m["f1"] == round(entity_metrics_of(dev, logits.argmax(-1), TAGS)["f1"], 6)
    assert m["token_accuracy"] > 0.8  # it learnt the 4 sentences it saw 8 times


def test_entity_f1_interval_resamples_sentences(conll):
    from compress.measure.metrics import task_ci95
    from compress.data.tokens import encode
    from compress.training.models import load_saved

    root, _, prepared, _ = conll
    _, tok = load_saved(root / "teacher")
    dev = encode(tok, prepared.split("dev") * 5, 64)
    perfect = task_ci95(prepared.task, dev, dev.labels)
    assert perfect == {"f1_ci95_low": 1.0, "f1_ci95_high": 1.0}
    pred = dev.labels.copy()
    for row in (1, 5, 9, 13, 17):  # sentence 1's PER missed in all 5 copies
        pred[dev.offsets[row]:dev.offsets[row + 1]] = TAG_ID["O"]
    ci = task_ci95(prepared.task, dev, pred)
    assert ci["f1_ci95_low"] < 12 / 13 < ci["f1_ci95_high"] < 1.0  # 6 of 7 gold found, 6 predicted


def test_teacher_cache_is_per_word_in_float16_and_distils(conll, tmp_path):
    from compress.training.distill import CacheConfig, DistillConfig, cache_teacher_outputs, distill, load_transfer
    from compress.training.models import load_saved
    from compress.training.train import FinetuneConfig

    root, _, prepared, _ = conll
    meta = cache_teacher_outputs(root / "teacher", prepared, tmp_path / "cache", CacheConfig(max_length=64))
    logits = np.load(tmp_path / "cache/logits.npy")
    assert logits.dtype == np.float16 and logits.shape == (meta["positions"], 9) and meta["rows"] == 28
    assert meta["storage"]["max_abs_logit_error"] < 0.01 and meta["storage"]["max_kl_t2"] < 1e-4
    assert meta["teacher_train_accuracy"] > 0.8
    rows, cached, _ = load_transfer(tmp_path / "cache", prepared)
    assert len(rows) == 28 and len(cached) == meta["positions"]
    cfg = DistillConfig(student_layers=[1], train=FinetuneConfig(epochs=2, batch_size=8, lr=5e-3,
                                                                 eval_every_steps=0))
    summary = distill(cfg, root / "teacher", tmp_path / "cache", prepared, tmp_path / "student",
                      tmp_path / "curves", tmp_path / "control", tmp_path / "control_curves", 64)
    assert summary["student"]["steps"] == summary["control"]["steps"] == 8
    student, _ = load_saved(tmp_path / "student")
    assert type(student).__name__ == "BertForTokenClassification" and student.config.num_hidden_layers == 1
    assert 0 <= summary["student"]["final_validation"]["f1"] <= 1


def test_augmentation_is_refused_for_tagging(conll, tmp_path):
    from compress.training.augment import AugmentConfig
    from compress.core.config import ConfigError
    from compress.training.distill import CacheConfig, cache_teacher_outputs

    root, _, prepared, _ = conll
    with pytest.raises(ConfigError, match="augment.size to 0"):
        cache_teacher_outputs(root / "teacher", prepared, tmp_path / "c", CacheConfig(
            augment=AugmentConfig(size=0.5, kinds=["word_drop"])))
    assert not (tmp_path / "c").exists()


def test_predict_prints_entities_with_character_spans(conll):
    from compress.predict import evaluate, load, predict

    root, *_ = conll
    loaded = load(root / "teacher")
    out = predict(loaded, [__import__("compress.data.prepare", fromlist=["Example"]).Example(
        "EU rejects German call to boycott British lamb .", None, -1)])
    assert out[0]["text"].startswith("EU rejects")
    for e in out[0]["entities"]:
        assert out[0]["text"][e["start"]:e["end"]] == e["text"] and e["type"] in ("PER", "ORG", "LOC", "MISC")
        assert 0 < e["score"] <= 1
    res = evaluate(loaded, preset("conll2003", root / "src"), "dev", max_length=64)
    assert res["rows"] == 4 and set(res["f1_per_type"]) == {"PER", "ORG", "LOC", "MISC"} and res["entities"] == 7


def test_comparison_and_select_rank_taggers_by_entity_f1():
    """A tagger's records carry entity F1 and no row accuracy: the comparison's main column,
    deltas and Pareto front, and the selection's floor, are all on F1."""
    from compress.report import comparison as C
    from compress.report.select import SelectPolicy, select
    from test_report import ENV

    def rec(name, f1, p50, fmt="onnx", precision="int8"):
        return {"artifact": name, "target": "cpu", "status": "ok", "reason": None, "stage": "x", "backend": "b",
                "format": fmt, "precision": precision, "task": "conll2003", "accuracy": None, "f1": f1,
                "f1_ci95_low": f1 - 0.01, "f1_ci95_high": f1 + 0.01, "token_accuracy": 0.97,
                "validation_metrics": {"f1": f1, "token_accuracy": 0.97},
                "parent": "student", "latency_ms_p50": p50, "latency_ms_p99": p50 * 1.5,
                "real_latency_ms_p50": p50 / 3, "real_latency_ms_p99": p50 / 2,
                "throughput_seq_per_s": 100.0, "size_mb": 10.0, "num_params": 1000, "peak_mem_mb": 500.0,
                "threads": 2}

    comp = {"environment": ENV, "records": [rec("teacher", 0.90, 20.0, "pytorch", "fp32"),
                                            rec("student", 0.89, 9.0, "pytorch", "fp32"),
                                            rec("lossy_int8", 0.80, 2.0), rec("int8", 0.888, 4.0)]}
    rows = C.table_rows(comp, "cpu")
    assert {r["artifact"]: r["score_delta_pts"] for r in rows}["int8"] == -1.2
    assert C.pareto_front(rows) == ["lossy_int8", "int8", "student", "teacher"]
    md = C.target_table_markdown(comp, "cpu")
    assert "entity F1 [95% CI]" in md and "| F1" not in md  # one F1 column, the main one
    sel = select(comp, SelectPolicy())
    assert sel["chosen"] == "int8" and sel["teacher_f1"] == 0.90
    assert {r["artifact"]: r["rule"] for r in sel["rejected"]} == {"lossy_int8": "f1_floor"}
    assert any("of the teacher's F1" in r for r in sel["reasons"])
