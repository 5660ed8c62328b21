"""The data layer: a task's labels come from its training split, every split is validated
against them (file and line in the error), a dev split is carved when there is none, and
prepare writes splits and a card for any kind (the readers themselves: test_formats)."""
import json

import pytest

from compress.core.config import ConfigError
from compress.data.prepare import DataError, Prepared, carve, label_set, prepare, read_split
from compress.data.tokens import collate, encode
from conftest import MRPC_NAMES, SHARED_DATA, SST2_NAMES, make_task, preset, tiny_model

INTENTS = ["card_arrival", "pin_blocked", "top_up_failed", "lost_card", "exchange_rate"]


def write_intents(d, rows_per_label=12, extra_dev=None):
    """A 5-intent CSV task: quoted commas and line breaks, a byte-order mark, no dev file."""
    d.mkdir(parents=True, exist_ok=True)
    lines = ["text,category"]
    for i in range(rows_per_label):
        for k, label in enumerate(INTENTS):
            lines.append(f'"query {i} about {label.replace("_", " ")}, please\nhelp",{label}')
    (d / "train.csv").write_bytes(b"\xef\xbb\xbf" + ("\r\n".join(lines) + "\r\n").encode())
    if extra_dev is not None:
        (d / "dev.csv").write_text("text,category\n" + "\n".join(extra_dev) + "\n")
    return d


def banking(d, **kw):
    return preset("banking77", d, **kw)


def test_labels_come_from_the_training_split(tmp_path):
    task, facts = label_set(banking(write_intents(tmp_path / "b")))
    assert task.kind == "classification" and task.labels == tuple(sorted(INTENTS))
    assert task.label_names == task.labels and task.metrics == ("accuracy", "macro_f1")


def test_params_labels_fix_the_order_and_refuse_a_label_not_listed(tmp_path):
    src = write_intents(tmp_path / "b")
    order = list(reversed(INTENTS))
    assert label_set(banking(src, labels=order))[0].labels == tuple(order)
    with pytest.raises(DataError, match=r"train\.csv:\d+: label 'exchange_rate' is not in prepare\.labels"):
        label_set(banking(src, labels=INTENTS[:4] + ["other"]))


def test_a_dev_label_training_never_had_names_file_and_line(tmp_path):
    src = write_intents(tmp_path / "b", extra_dev=["fine,card_arrival", "what is this,refund_request"])
    with pytest.raises(DataError, match=r"dev\.csv:3: label 'refund_request' is not one of the task's labels"):
        prepare(banking(src, dev="dev.csv"), tmp_path / "out")
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_dev_carve_is_seeded_stratified_and_disjoint(tmp_path):
    src = write_intents(tmp_path / "b", rows_per_label=20)
    card = prepare(banking(src, dev_fraction=0.25, seed=3), tmp_path / "out")
    p = Prepared.open(tmp_path / "out")
    train, dev = p.split("train"), p.split("dev")
    assert len(train) == 65 and len(dev) == 25 and len(p.validation()) == 10  # validation: 10% of the 75 left
    assert set(card["splits"]["dev"]["label_counts"].values()) == {5}  # 25% of each intent's 20 rows
    assert not {(e.text_a, e.label) for e in train} & {(e.text_a, e.label) for e in dev}
    assert card["dev_carved"]["rows"] == 25 and len(card["dev_carved"]["row_ids_sha256"]) == 64
    again = prepare(banking(src, dev_fraction=0.25, seed=3), tmp_path / "again")
    other = prepare(banking(src, dev_fraction=0.25, seed=4), tmp_path / "other")
    assert again["dev_carved"] == card["dev_carved"] and again["splits"] == card["splits"]
    assert other["dev_carved"]["row_ids_sha256"] != card["dev_carved"]["row_ids_sha256"]


def test_carve_keeps_one_row_of_every_label_on_each_side():
    task = make_task(labels=("a", "b", "c"))
    from compress.data.prepare import Example

    rows = [Example(f"t{i}", None, 0) for i in range(50)] + [Example("b1", None, 1), Example("b2", None, 1),
                                                             Example("c1", None, 2)]
    keep, dev = carve(rows, task, 0.1, seed=0)
    assert sorted(keep + dev) == list(range(53)) and not set(keep) & set(dev)
    assert [rows[i].label for i in dev].count(1) == 1  # 2 rows: one each side
    assert all(rows[i].label != 2 for i in dev)  # a single row stays in train


def test_prepare_writes_splits_and_card(tmp_path, sst2_dir):
    card = prepare(preset("sst2", sst2_dir, max_train_rows=10, seed=1), tmp_path / "out")
    p = Prepared.open(tmp_path / "out")
    assert len(p.split("train")) == 10 and len(p.split("dev")) == 8
    assert card["kind"] == "classification" and card["labels"] == ["0", "1"]
    assert card["label_names"] == list(SST2_NAMES) and p.task.label_names == SST2_NAMES
    assert card["splits"]["dev"]["label_counts"] == {"negative": 4, "positive": 4}
    assert card["splits"]["train"]["rows"] == 10 and card["dev_carved"] is None
    assert len(card["splits"]["train"]["sha256"]) == 64
    assert json.loads((tmp_path / "out" / "card.json").read_text()) == card
    again = prepare(preset("sst2", sst2_dir, max_train_rows=10, seed=1), tmp_path / "again")
    assert again["splits"]["train"]["sha256"] == card["splits"]["train"]["sha256"]


def test_failed_prepare_keeps_previous_output(tmp_path, sst2_dir):
    out = tmp_path / "out"
    prepare(preset("sst2", sst2_dir), out)
    before = (out / "train.jsonl").read_bytes()
    (sst2_dir / "dev.tsv").write_text("sentence\tlabel\nbroken\t7\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"dev\.tsv:2: label '7'"):
        prepare(preset("sst2", sst2_dir), out)
    assert (out / "train.jsonl").read_bytes() == before
    assert not list(tmp_path.glob("out.tmp-*"))


def test_a_missing_split_file_names_the_key(tmp_path, sst2_dir):
    with pytest.raises(DataError, match=r"valid\.tsv: file not found .*prepare\.dev names"):
        prepare(preset("sst2", sst2_dir, dev="valid.tsv"), tmp_path / "out")


def test_columns_a_kind_does_not_read_are_refused(sst2_dir):
    with pytest.raises(ConfigError, match="text_pair names a second text"):
        preset("sst2", sst2_dir, columns={"text": "sentence", "text_pair": "other", "label": "label"})
    with pytest.raises(ConfigError, match=r"unknown columns key\(s\) \['sentence'\]"):
        preset("sst2", sst2_dir, columns={"sentence": "text"})


def test_jsonl_pair_task(tmp_path):
    d = tmp_path / "pairs"
    d.mkdir()
    rows = [{"q": f"question {i}", "a": f"answer {i}", "y": ["no", "yes", "maybe"][i % 3]} for i in range(30)]
    (d / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cfg = preset("mrpc", d, train="train.jsonl", dev=None, columns={"text": "q", "text_pair": "a", "label": "y"},
                 labels=None, label_names=None)
    card = prepare(cfg, tmp_path / "out")
    p = Prepared.open(tmp_path / "out")
    assert p.task.labels == ("maybe", "no", "yes") and p.task.metrics == ("accuracy", "macro_f1")
    assert card["splits"]["dev"]["rows"] == 3 and p.split("dev")[0].text_b.startswith("answer")


def test_mrpc_bom_quotes_and_pairs(mrpc_dir):
    rows = list(read_split(preset("mrpc", mrpc_dir), "dev"))
    assert len(rows) == 8
    assert rows[0].text_a.startswith('he said " the cat "')  # quotes kept verbatim (quoting off)
    assert rows[0].text_b == "the cat was fine , he said"
    assert [r.label for r in rows[:2]] == [0, 1]
    task = label_set(preset("mrpc", mrpc_dir))[0]
    assert task.label_names == MRPC_NAMES and task.metrics == ("accuracy", "f1")


def test_tagger_tags_come_from_the_data_iob1_and_iob2(tmp_path):
    d = tmp_path / "tags"
    d.mkdir()
    # IOB1: an entity may open with I-; B- only splits two adjacent entities of one type
    (d / "train.tsv").write_text(("The\tO\naspirin\tI-Drug\ndose\tO\n\nfever\tI-Symptom\nand\tO\n"
                                  "cough\tI-Symptom\ncold\tB-Symptom\n\n") * 2)  # twice: one of each to validation
    (d / "devel.tsv").write_text("aspirin\tB-Drug\nhelps\tO\n\n")
    card = prepare(preset("ncbi_disease", d), tmp_path / "out")
    assert card["labels"] == ["O", "B-Drug", "I-Drug", "B-Symptom", "I-Symptom"]
    assert card["entity_types"] == ["Drug", "Symptom"]
    assert card["splits"]["train"]["tag_scheme"] == "IOB1" and card["splits"]["dev"]["tag_scheme"] == "IOB2"
    assert card["splits"]["train"]["entities"] == {"Drug": 1, "Symptom": 3}


def test_tagger_refuses_other_schemes_and_unknown_dev_tags(tmp_path):
    d = tmp_path / "bioes"
    d.mkdir()
    (d / "train.tsv").write_text("New\tB-LOC\nYork\tE-LOC\nis\tO\nbig\tS-ADJ\n\n")
    (d / "devel.tsv").write_text("x\tO\n\n")
    with pytest.raises(DataError, match=r"look like BIOES/IOBES"):
        prepare(preset("ncbi_disease", d), tmp_path / "out")
    (d / "train.tsv").write_text("aspirin\tB-Drug\nhelps\tO\n\n")
    (d / "devel.tsv").write_text("ok\tO\nfever\tB-Symptom\n\n")
    with pytest.raises(DataError, match=r"devel\.tsv:2: tag 'B-Symptom' is not one of the task's tags"):
        prepare(preset("ncbi_disease", d), tmp_path / "out")


def test_real_files_read_completely():
    counts = {}
    for t, splits in (("sst2", ("train", "dev")), ("mrpc", ("train", "dev")), ("ncbi_disease", ("train", "dev"))):
        cfg = preset(t, SHARED_DATA / t)
        task = label_set(cfg)[0]
        counts.update({(t, s): sum(1 for _ in read_split(cfg, s, task)) for s in splits})
        if t == "ncbi_disease":
            assert task.labels == ("O", "B-Disease", "I-Disease")
    assert counts == {("sst2", "train"): 67349, ("sst2", "dev"): 872, ("mrpc", "train"): 3667,
                      ("mrpc", "dev"): 408, ("ncbi_disease", "train"): 5424, ("ncbi_disease", "dev"): 923}
    task = label_set(preset("banking77", SHARED_DATA / "banking77"))[0]
    assert task.num_labels == 77 and "card_arrival" in task.labels


def test_long_sequence_is_truncated_not_rejected():
    _, tok = tiny_model()
    from compress.data.prepare import Example
    long = Example("word " * 5000, None, 1)
    pair = Example("left " * 3000, "right " * 3000, 0)
    enc = encode(tok, [long], max_length=128)
    assert len(enc.input_ids[0]) == 128
    enc_pair = encode(tok, [pair], max_length=128)
    assert len(enc_pair.input_ids[0]) == 128
    assert 1 in enc_pair.token_type_ids[0]  # the second sentence keeps segment id 1
    # Asking for more than the model allows is capped at the tokenizer's limit.
    assert len(encode(tok, [long], max_length=100_000).input_ids[0]) == tok.model_max_length


def test_pair_inputs_carry_token_type_ids(mrpc_dir):
    _, tok = tiny_model()
    rows = list(read_split(preset("mrpc", mrpc_dir), "dev"))
    batch = collate(encode(tok, rows, 64), [0, 1])
    assert batch["input_ids"].shape == batch["token_type_ids"].shape == batch["attention_mask"].shape
    assert batch["token_type_ids"].max() == 1
    assert batch["token_type_ids"][0, 0] == 0


def test_hub_rows_are_validated(monkeypatch):
    import sys
    import types
    calls = {}

    class Label:
        names = ["negative", "positive"]

    class Rows(list):
        features = {"sentence": None, "idx": None, "label": Label()}

    def load_dataset(path, name=None, split=None, revision=None):
        calls.update(path=path, name=name, split=split, revision=revision)
        return Rows([{"sentence": "fine", "label": 1, "idx": 0}, {"sentence": "odd", "label": 5, "idx": 1}])

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    cfg = preset("sst2", "hub:glue/sst2", train="train", dev="validation", revision="abc123", labels=None,
                 label_names=None)
    with pytest.raises(DataError, match=r"hub:glue/sst2\[validation\] row 1: label id 5"):
        list(read_split(cfg, "dev", make_task(labels=("negative", "positive"))))
    assert calls == {"path": "nyu-mll/glue", "name": "sst2", "split": "validation", "revision": "abc123"}


def test_one_calibration_sampler_draws_training_rows_only(prepared_sst2):
    """Prepared.calibration_rows: seeded, training rows only, every row when asked for more;
    OpenVINO calibrates on exactly its rows and checks accuracy on the validation split."""
    from compress.backends.openvino_check import quantization_slices
    from compress.backends.openvino_ir import OpenVinoConfig
    from compress.data.prepare import Prepared
    from compress.data.tokens import encode
    from conftest import tiny_model

    prepared = Prepared.open(prepared_sst2)
    train = prepared.split("train")
    rows = prepared.calibration_rows(10, seed=3)
    assert len(rows) == 10 and all(r in train for r in rows)
    assert rows == prepared.calibration_rows(10, seed=3) and rows != prepared.calibration_rows(10, seed=4)
    assert sorted(map(repr, prepared.calibration_rows(10_000, seed=0))) == sorted(map(repr, train))
    _, tok = tiny_model()
    n_val = len(prepared.validation())
    data = quantization_slices(prepared_sst2, tok, OpenVinoConfig(calibration_rows=6, validation_rows=n_val, seed=3))
    expected = encode(tok, prepared.calibration_rows(6, seed=3) + prepared.validation(), 128)
    got = [c["input_ids"][0].tolist() for c in data.calibration] + \
        [v["inputs"]["input_ids"][0].tolist() for v in data.validation]
    assert got == [list(ids) for ids in expected.input_ids] and data.info["train_rows"] == len(train)
    assert data.info["validation_split"] == "validation" and data.info["validation_rows"] == n_val
    # the float-parts check's batches hold the same validation rows, no calibration row
    batched = sorted(tuple(r[m == 1].tolist()) for b in data.batched
                     for r, m in zip(b["inputs"]["input_ids"], b["inputs"]["attention_mask"]))
    assert batched == sorted(tuple(v["inputs"]["input_ids"][0].tolist()) for v in data.validation)
