"""Task data: validation errors name file and line, real GLUE files read correctly,
long inputs are truncated, prepare writes splits and a card."""
import json

import pytest

from compress.data import DataError, PrepareConfig, Prepared, get_task, prepare, read_glue_tsv, read_split
from compress.tokens import collate, encode
from conftest import SHARED_DATA, tiny_model, write_tsv

SST2 = get_task("sst2")
MRPC = get_task("mrpc")


def read_all(path, task=SST2):
    return list(read_glue_tsv(path, task))


def test_missing_file_names_path(tmp_path):
    with pytest.raises(DataError, match=r"train\.tsv: file not found"):
        read_all(tmp_path / "train.tsv")


def test_wrong_columns(tmp_path):
    p = write_tsv(tmp_path / "train.tsv", ["text", "label"], [["fine", "1"]])
    with pytest.raises(DataError, match=r"train\.tsv:1: wrong columns for task 'sst2'.*\['text', 'label'\]"):
        read_all(p)


def test_label_outside_task_labels(tmp_path):
    p = write_tsv(tmp_path / "dev.tsv", ["sentence", "label"], [["good", "1"], ["bad", "0"], ["meh", "2"]])
    with pytest.raises(DataError, match=r"dev\.tsv:4: label '2' is not one of task 'sst2' labels"):
        read_all(p)


def test_empty_sentence(tmp_path):
    p = write_tsv(tmp_path / "dev.tsv", ["sentence", "label"], [["good", "1"], ["  ", "0"]])
    with pytest.raises(DataError, match=r"dev\.tsv:3: empty sentence in column 'sentence'"):
        read_all(p)


def test_non_utf8_byte(tmp_path):
    p = tmp_path / "dev.tsv"
    p.write_bytes(b"sentence\tlabel\ngood\t1\ncaf\xe9 time\t0\n")
    with pytest.raises(DataError, match=r"dev\.tsv:3: not valid UTF-8 \(byte 0xe9"):
        read_all(p)


def test_extra_tab_in_row(tmp_path):
    p = write_tsv(tmp_path / "dev.tsv", ["sentence", "label"], [["good", "1"], ["bad\tvery", "0"]])
    with pytest.raises(DataError, match=r"dev\.tsv:3: expected 2 tab-separated fields, found 3"):
        read_all(p)


def test_blank_line_inside_data(tmp_path):
    p = tmp_path / "dev.tsv"
    p.write_text("sentence\tlabel\ngood\t1\n\nbad\t0\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"dev\.tsv:3: empty line inside the data"):
        read_all(p)


def test_trailing_blank_line_is_fine(tmp_path):
    p = tmp_path / "dev.tsv"
    p.write_text("sentence\tlabel\ngood\t1\nbad\t0\n\n", encoding="utf-8")
    assert [e.label for e in read_all(p)] == [1, 0]


def test_mrpc_bom_quotes_and_pairs(mrpc_dir):
    rows = list(read_split(str(mrpc_dir), "dev", MRPC))
    assert len(rows) == 8
    assert rows[0].text_a.startswith('he said " the cat "')  # quotes kept verbatim (quoting off)
    assert rows[0].text_b == "the cat was fine , he said"
    assert [r.label for r in rows[:2]] == [0, 1]


def test_real_glue_files_read_completely():
    counts = {(t, s): sum(1 for _ in read_split(str(SHARED_DATA / t), s, get_task(t)))
              for t in ("sst2", "mrpc") for s in ("train", "dev")}
    assert counts == {("sst2", "train"): 67349, ("sst2", "dev"): 872,
                      ("mrpc", "train"): 3667, ("mrpc", "dev"): 408}


def test_long_sequence_is_truncated_not_rejected():
    _, tok = tiny_model()
    from compress.data import Example
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
    rows = list(read_split(str(mrpc_dir), "dev", MRPC))
    batch = collate(encode(tok, rows, 64), [0, 1])
    assert batch["input_ids"].shape == batch["token_type_ids"].shape == batch["attention_mask"].shape
    assert batch["token_type_ids"].max() == 1
    assert batch["token_type_ids"][0, 0] == 0


def test_prepare_writes_splits_and_card(tmp_path, sst2_dir):
    card = prepare(PrepareConfig(task="sst2", source=str(sst2_dir), max_train_rows=10, seed=1),
                   tmp_path / "out")
    p = Prepared.open(tmp_path / "out")
    assert len(p.split("train")) == 10 and len(p.split("dev")) == 8
    assert card["splits"]["dev"]["label_counts"] == {"negative": 4, "positive": 4}
    assert card["splits"]["train"]["rows"] == 10
    assert len(card["splits"]["train"]["sha256"]) == 64
    assert json.loads((tmp_path / "out" / "card.json").read_text()) == card
    # Same seed, same slice: the content hash is repeatable.
    again = prepare(PrepareConfig(task="sst2", source=str(sst2_dir), max_train_rows=10, seed=1),
                    tmp_path / "again")
    assert again["splits"]["train"]["sha256"] == card["splits"]["train"]["sha256"]


def test_failed_prepare_keeps_previous_output(tmp_path, sst2_dir):
    out = tmp_path / "out"
    prepare(PrepareConfig(task="sst2", source=str(sst2_dir)), out)
    before = (out / "train.jsonl").read_bytes()
    (sst2_dir / "dev.tsv").write_text("sentence\tlabel\nbroken\t7\n", encoding="utf-8")
    with pytest.raises(DataError, match="label '7'"):
        prepare(PrepareConfig(task="sst2", source=str(sst2_dir)), out)
    assert (out / "train.jsonl").read_bytes() == before
    assert not list(tmp_path.glob("out.tmp-*"))


def test_hub_source_without_datasets_package_says_how(monkeypatch):
    import builtins
    real_import = builtins.__import__

    def no_datasets(name, *a, **k):
        if name == "datasets":
            raise ImportError("no datasets")
        return real_import(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_datasets)
    with pytest.raises(DataError, match=r"pip install 'bert-compress\[hub\]'"):
        list(read_split("hub:glue/sst2", "dev", SST2))


def test_hub_rows_are_validated(monkeypatch):
    import sys
    import types
    calls = {}

    def load_dataset(path, name=None, split=None, revision=None):
        calls.update(path=path, name=name, split=split, revision=revision)
        return [{"sentence": "fine", "label": 1, "idx": 0}, {"sentence": "odd", "label": 5, "idx": 1}]

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    with pytest.raises(DataError, match=r"hub:glue/sst2\[validation\] row 1: label 5"):
        list(read_split("hub:glue/sst2", "dev", SST2, revision="abc123"))
    assert calls == {"path": "nyu-mll/glue", "name": "sst2", "split": "validation", "revision": "abc123"}
