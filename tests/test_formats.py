"""The data-file readers (compress.tasks.formats): parsed values on tiny files written here,
every refusal with its exact `file:line`, the Hub readers over a fake `datasets` module, and
the real shared files when they lie beside the checkout."""
from __future__ import annotations

import re
import sys
import types
from pathlib import Path

import pytest
from conftest import SHARED_DATA

from compress.core.errors import DataError
from compress.tasks.formats import (FORMATS, Row, TaggedRow, format_of, read_hub_table, read_hub_tagged, read_table,
                                    read_tagged)


def write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    return path


def at(path: Path | str, line: int | None, rest: str) -> str:
    """A pattern for a message that starts with `path:line: ` and then holds `rest` (a regex)."""
    where = f"{path}:{line}: " if line is not None else f"{path}: "
    return "^" + re.escape(where) + ".*" + rest


def table(path, fmt, text="text", text_pair=None, label="label") -> list[Row]:
    return list(read_table(path, fmt, text, text_pair, label))


# --- format_of --------------------------------------------------------------------------

@pytest.mark.parametrize("name, tagging, fmt", [
    ("a.csv", False, "csv"), ("a.CSV", True, "csv"), ("a.jsonl", False, "jsonl"), ("a.json", True, "jsonl"),
    ("a.tsv", False, "tsv"), ("a.tsv", True, "conll"), ("a.txt", True, "conll"), ("a.conll", False, "conll"),
    ("a.iob", True, "conll"), ("a.bio", True, "conll"), ("a.iob2", True, "conll"),
])
def test_format_of_extension(name, tagging, fmt):
    assert format_of(Path("/d") / name, None, tagging) == fmt


def test_format_of_explicit_wins_and_is_checked():
    assert format_of("x.csv", "jsonl", False) == "jsonl"
    assert set(FORMATS) == {"csv", "tsv", "jsonl", "conll"}
    with pytest.raises(DataError, match=r"unknown data format 'xlsx': choose one of csv, tsv, jsonl, conll"):
        format_of("x.csv", "xlsx", False)


def test_format_of_unknown_extension():
    with pytest.raises(DataError, match=r"^data/train\.parquet: .*'\.parquet'.*set prepare\.format"):
        format_of("data/train.parquet", None, False)
    with pytest.raises(DataError, match=r"^data/train: .*'\(none\)'.*set prepare\.format"):
        format_of("data/train", None, True)


# --- csv -----------------------------------------------------------------------------------

def test_csv_good_rows(tmp_path):
    p = write(tmp_path, "train.csv",
              "\ufefftext,label\r\n"
              "plain,a\r\n"
              '"with, comma",b\r\n'
              '"say ""hi""",c\r\n'
              '"two\nlines\n",d\r\n'
              "\r\n"                      # blank lines carry no record
              "last, e \r\n")             # labels are stripped
    rows = table(p, "csv")
    assert rows == [Row(2, "plain", None, "a"), Row(3, "with, comma", None, "b"), Row(4, 'say "hi"', None, "c"),
                    Row(5, "two\nlines\n", None, "d"), Row(9, "last", None, "e")]


def test_csv_text_pair_and_column_order(tmp_path):
    p = write(tmp_path, "pairs.csv", " label , b ,a,extra\n1,second,first,x\n0,y,z,\n")
    rows = table(p, "csv", text="a", text_pair="b")
    assert rows == [Row(2, "first", "second", "1"), Row(3, "z", "y", "0")]


def test_csv_missing_file_and_directory(tmp_path):
    with pytest.raises(DataError, match=at(tmp_path / "nope.csv", None, "file not found")):
        read_table(tmp_path / "nope.csv", "csv", "text", None, "label")
    with pytest.raises(DataError, match=at(tmp_path, None, "is a directory")):
        read_table(tmp_path, "csv", "text", None, "label")


def test_csv_missing_column(tmp_path):
    p = write(tmp_path, "train.csv", "text,intent\nhi,x\n")
    with pytest.raises(DataError, match=at(p, 1, re.escape("missing column(s) ['category']; the header has "
                                                           "['text', 'intent']; set prepare.columns"))):
        table(p, "csv", label="category")


def test_csv_duplicate_column(tmp_path):
    p = write(tmp_path, "train.csv", "text,label,text\nhi,x,y\n")
    with pytest.raises(DataError, match=at(p, 1, r"\['text'\] appear more than once")):
        table(p, "csv")


def test_csv_empty_file(tmp_path):
    p = write(tmp_path, "train.csv", "")
    with pytest.raises(DataError, match=at(p, 1, "empty; it needs a header row")):
        table(p, "csv")


def test_csv_wrong_field_count(tmp_path):
    # The record on line 3 spans two lines; the bad one after it starts on line 5.
    p = write(tmp_path, "train.csv", 'text,label\nok,a\n"multi\nline",b\nhello, world,c\n')
    with pytest.raises(DataError, match=at(p, 5, "3 field.*header has 2.*quote a field that holds a comma")):
        table(p, "csv")


def test_csv_empty_text_and_label(tmp_path):
    p = write(tmp_path, "train.csv", "text,label\nok,a\nok,b\n   ,c\n")
    with pytest.raises(DataError, match=at(p, 4, "empty text in 'text'; fill it in or delete the row")):
        table(p, "csv")
    p = write(tmp_path, "train.csv", 'text,label\nok,a\n"x\ny",  \n')
    with pytest.raises(DataError, match=at(p, 3, "empty label in 'label'")):
        table(p, "csv")


def test_csv_unterminated_quote_reports_record_start(tmp_path):
    p = write(tmp_path, "train.csv", 'text,label\nok,a\n"never closed,b\nmore,c\nand more,d\n')
    with pytest.raises(DataError, match=at(p, 3, "quoted field .* never closed")):
        table(p, "csv")


def test_csv_stray_quote_and_bare_cr(tmp_path):
    p = write(tmp_path, "train.csv", 'text,label\nok,a\n"quoted"tail,b\n')
    with pytest.raises(DataError, match=at(p, 3, "malformed CSV")):
        table(p, "csv")
    p = write(tmp_path, "train.csv", "text,label\nok,a\nx,1\ry,2\n")
    with pytest.raises(DataError, match=at(p, 3, r"bare carriage return")):
        table(p, "csv")


def test_csv_not_utf8_names_line_and_byte(tmp_path):
    p = write(tmp_path, "train.csv", b"text,label\nok,a\ncaf\xe9,b\n")
    with pytest.raises(DataError, match=at(p, 3, r"not valid UTF-8 \(byte 0xe9 at byte 4 of the line\)")):
        table(p, "csv")


def test_csv_streams_rows_before_a_later_error(tmp_path):
    p = write(tmp_path, "train.csv", "text,label\nok,a\n,b\n")
    rows = read_table(p, "csv", "text", None, "label")
    assert next(rows) == Row(2, "ok", None, "a")
    with pytest.raises(DataError, match=at(p, 3, "empty text")):
        next(rows)


# --- tsv -----------------------------------------------------------------------------------

MRPC_HEAD = "Quality\t#1 ID\t#2 ID\t#1 String\t#2 String"


def test_tsv_good_rows_quotes_are_ordinary(tmp_path):
    p = write(tmp_path, "dev.tsv", b"\xef\xbb\xbf" + (
        f"{MRPC_HEAD}\r\n"
        '1\t10\t20\the said " the cat " was fine .\t" unbalanced quote .\r\n'
        "0\t11\t21\tplain , text\tother text\r\n"
        "\r\n\n").encode())
    rows = table(p, "tsv", text="#1 String", text_pair="#2 String", label="Quality")
    assert rows == [Row(2, 'he said " the cat " was fine .', '" unbalanced quote .', "1"),
                    Row(3, "plain , text", "other text", "0")]


def test_tsv_blank_line_inside_data(tmp_path):
    p = write(tmp_path, "train.tsv", "sentence\tlabel\ngood\t1\n\nbad\t0\n")
    with pytest.raises(DataError, match=at(p, 3, r"empty line inside the data \(the next row is on line 4\)")):
        table(p, "tsv", text="sentence")
    p = write(tmp_path, "train.tsv", "\nsentence\tlabel\ngood\t1\n")
    with pytest.raises(DataError, match=at(p, 1, "empty line before the header")):
        table(p, "tsv", text="sentence")


def test_tsv_wrong_field_count_mentions_tab(tmp_path):
    p = write(tmp_path, "train.tsv", "sentence\tlabel\ngood\t1\na\ttabbed sentence\t0\n")
    with pytest.raises(DataError, match=at(p, 3, "3 field.*header has 2.*a sentence may contain a tab")):
        table(p, "tsv", text="sentence")


def test_tsv_missing_column_empty_fields_and_bad_bytes(tmp_path):
    p = write(tmp_path, "train.tsv", "sentence\tlabel\ngood\t1\n")
    with pytest.raises(DataError, match=at(p, 1, re.escape("missing column(s) ['#2 String']"))):
        table(p, "tsv", text="sentence", text_pair="#2 String")
    p = write(tmp_path, "pairs.tsv", "a\tb\tlabel\nx\ty\t1\nx\t \t0\n")
    with pytest.raises(DataError, match=at(p, 3, "empty text in 'b'")):
        table(p, "tsv", text="a", text_pair="b")
    p = write(tmp_path, "train.tsv", "sentence\tlabel\ngood\t1\ngood\t\n")
    with pytest.raises(DataError, match=at(p, 3, "empty label")):
        table(p, "tsv", text="sentence")
    p = write(tmp_path, "train.tsv", b"sentence\tlabel\ngood\t1\ngood\t1\nbad \xff\xfe\t0\n")
    with pytest.raises(DataError, match=at(p, 4, r"not valid UTF-8 \(byte 0xff at byte 5")):
        table(p, "tsv", text="sentence")


# --- jsonl (classification) ------------------------------------------------------------------

def test_jsonl_good_rows(tmp_path):
    p = write(tmp_path, "train.jsonl",
              '{"q": "first", "a": "one", "y": "pos"}\n'
              "\n"
              '{"y": 3, "q": "second", "a": "two", "extra": [1]}\n'
              '  {"q": "third", "a": "three", "y": true}\r\n')
    rows = table(p, "jsonl", text="q", text_pair="a", label="y")
    assert rows == [Row(1, "first", "one", "pos"), Row(3, "second", "two", "3"), Row(4, "third", "three", "True")]


@pytest.mark.parametrize("line, message", [
    ('{"text": "x", "label": ', r"not valid JSON \(Expecting value at column 24\)"),
    ('[{"text": "x", "label": "a"}]', r"expected a JSON object \{\.\.\.\}, found a list"),
    ('"just a string"', "expected a JSON object.*found a string"),
    ('{"text": "x"}', re.escape("missing key(s) ['label']; the object has ['text']; set prepare.columns")),
    ('{"text": "x", "label": 1.5}', "label in 'label' is a number with a fraction"),
    ('{"text": "x", "label": ["a"]}', "label in 'label' is a list"),
    ('{"text": "x", "label": null}', "label in 'label' is null"),
    ('{"text": "x", "label": " "}', "empty label"),
    ('{"text": 7, "label": "a"}', "text in 'text' is an integer; it must be a string"),
    ('{"text": "", "label": "a"}', "empty text in 'text'"),
])
def test_jsonl_malformed(tmp_path, line, message):
    p = write(tmp_path, "train.jsonl", '{"text": "fine", "label": "a"}\n\n' + line + "\n")
    with pytest.raises(DataError, match=at(p, 3, message)):
        table(p, "jsonl")


# --- jsonl (tagging) ---------------------------------------------------------------------

def test_jsonl_tagged_good(tmp_path):
    p = write(tmp_path, "train.jsonl", '{"tokens": ["EU", "rejects"], "tags": ["B-ORG", "O"]}\n\n'
                                       '{"w": ["Peter"], "t": ["B-PER"]}\n')
    rows = read_tagged(p, "jsonl")
    assert next(rows) == TaggedRow(1, ("EU", "rejects"), ("B-ORG", "O"))
    missing = re.escape("missing key(s) ['tokens', 'tags']; the object has ['w', 't']")
    with pytest.raises(DataError, match=at(p, 3, missing)):
        next(rows)
    p = write(tmp_path, "other.jsonl", '{"w": ["Peter"], "t": ["B-PER"]}\n')
    assert list(read_tagged(p, "jsonl", tokens="w", tags="t")) == [TaggedRow(1, ("Peter",), ("B-PER",))]


@pytest.mark.parametrize("obj, message", [
    ('{"tokens": ["a", "b"], "tags": ["O"]}', r"2 token\(s\) in 'tokens' but 1 tag\(s\) in 'tags'"),
    ('{"tokens": [], "tags": []}', "'tokens' is empty"),
    ('{"tokens": "a b", "tags": ["O", "O"]}', "'tokens' is a string; it must be a list of strings"),
    ('{"tokens": ["a"], "tags": [0]}', "item 0 of 'tags' is an integer; each must be a non-empty string"),
    ('{"tokens": ["a", ""], "tags": ["O", "O"]}', "item 1 of 'tokens' is an empty string"),
    ('{"tokens": ["a"], "tags": null}', "'tags' is null"),
])
def test_jsonl_tagged_malformed(tmp_path, obj, message):
    p = write(tmp_path, "train.jsonl", '{"tokens": ["ok"], "tags": ["O"]}\n' + obj + "\n")
    with pytest.raises(DataError, match=at(p, 2, message)):
        list(read_tagged(p, "jsonl"))


# --- conll ---------------------------------------------------------------------------------

def test_conll_good(tmp_path):
    p = write(tmp_path, "train.txt",
              "\ufeff-DOCSTART- -X- -X- O\n"
              "\n"
              "EU NNP B-NP B-ORG\n"
              "rejects\tVBZ\tB-VP\tO\n"
              "\n\n"
              "Peter  B-PER\r\n"
              "Blackburn\tI-PER  \r\n"
              "-DOCSTART- O\n"            # a marker right after a sentence also ends it
              "BRUSSELS B-LOC\n"
              "1996-08-22 O")             # no trailing newline: the last sentence still counts
    assert list(read_tagged(p, "conll", tokens="ignored", tags="ignored")) == [
        TaggedRow(3, ("EU", "rejects"), ("B-ORG", "O"), True),
        TaggedRow(7, ("Peter", "Blackburn"), ("B-PER", "I-PER"), True),
        TaggedRow(10, ("BRUSSELS", "1996-08-22"), ("B-LOC", "O"), True),
    ]


def test_conll_keeps_non_ascii_space_tokens(tmp_path):
    p = write(tmp_path, "train.iob", "a\tO\n\u00a0\tO\n")
    assert list(read_tagged(p, "conll"))[0].words == ("a", "\u00a0")


def test_conll_line_without_tag(tmp_path):
    p = write(tmp_path, "train.txt", "EU B-ORG\nrejects O\n\nPeter B-PER\nBlackburn\n")
    with pytest.raises(DataError, match=at(p, 5, "expected a token and its tag.*found 'Blackburn'")):
        list(read_tagged(p, "conll"))


def test_conll_not_utf8(tmp_path):
    p = write(tmp_path, "train.txt", b"EU B-ORG\n\nM\xfcnchen B-LOC\n")
    with pytest.raises(DataError, match=at(p, 3, r"not valid UTF-8 \(byte 0xfc at byte 2")):
        list(read_tagged(p, "conll"))


def test_wrong_reader_for_format(tmp_path):
    p = write(tmp_path, "train.txt", "EU B-ORG\n")
    with pytest.raises(DataError, match=at(p, None, "must be csv, tsv or jsonl, not 'conll'")):
        read_table(p, "conll", "text", None, "label")
    with pytest.raises(DataError, match=at(p, None, "must be conll or jsonl, not 'csv'")):
        read_tagged(p, "csv")
    with pytest.raises(DataError, match=at(tmp_path / "gone.txt", None, "file not found")):
        read_tagged(tmp_path / "gone.txt", "conll")


# --- hub (a fake `datasets` module: no network) -------------------------------------------------

class ClassLabel:
    def __init__(self, names):
        self.names = names


class Sequence:
    def __init__(self, feature):
        self.feature = feature


class FakeDataset:
    def __init__(self, features, rows):
        self.features, self._rows = features, rows

    def __iter__(self):
        return iter(self._rows)


@pytest.fixture
def fake_hub(monkeypatch):
    """Installs a fake `datasets` whose load_dataset returns `hub.dataset` (or raises
    `hub.error`) and records its calls in `hub.calls`."""
    hub = types.SimpleNamespace(calls=[], dataset=None, error=None)

    def load_dataset(*args, split=None, revision=None):
        hub.calls.append((args, split, revision))
        if hub.error:
            raise hub.error
        return hub.dataset

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    return hub


def test_hub_table_glue_classlabel(fake_hub):
    features = {"sentence1": None, "sentence2": None, "label": ClassLabel(["no", "yes"]), "idx": None}
    fake_hub.dataset = FakeDataset(features,
                                   [{"sentence1": "a", "sentence2": "b", "label": 1, "idx": 0},
                                    {"sentence1": "c", "sentence2": "d", "label": 0, "idx": 1}])
    rows = list(read_hub_table("glue/mrpc", "validation", "abc123", "sentence1", "sentence2", "label"))
    assert fake_hub.calls == [(("nyu-mll/glue", "mrpc"), "validation", "abc123")]
    assert rows == [Row(0, "a", "b", "yes"), Row(1, "c", "d", "no")]


def test_hub_table_plain_labels_and_errors(fake_hub):
    fake_hub.dataset = FakeDataset({"text": None, "label": None},
                                   [{"text": "x", "label": 4}, {"text": "y", "label": "neg"},
                                    {"text": "z", "label": 0.5}])
    rows = read_hub_table("user/intents", "train", None, "text", None, "label")
    assert fake_hub.calls == [(("user/intents",), "train", None)]
    assert [next(rows), next(rows)] == [Row(0, "x", None, "4"), Row(1, "y", None, "neg")]
    with pytest.raises(DataError, match=r"^hub:user/intents\[train\] row 2: the label in 'label' is a number"):
        next(rows)


def test_hub_table_unlabelled_split_and_missing_column(fake_hub):
    fake_hub.dataset = FakeDataset({"sentence": None, "label": ClassLabel(["neg", "pos"])},
                                   [{"sentence": "ok", "label": 1}, {"sentence": "hidden", "label": -1}])
    with pytest.raises(DataError, match=r"^hub:glue/sst2\[test\] row 1: label id -1 is not a class of 'label' "
                                         r"\(0\.\.1\)"):
        list(read_hub_table("glue/sst2", "test", None, "sentence", None, "label"))
    with pytest.raises(DataError, match=r"^hub:glue/sst2\[test\]: missing column\(s\) \['text'\]; the dataset has "
                                         r"\['sentence', 'label'\]; set prepare\.columns"):
        read_hub_table("glue/sst2", "test", None, "text", None, "label")


def test_hub_load_failure_and_missing_package(fake_hub, monkeypatch):
    fake_hub.error = FileNotFoundError("Dataset 'nobody/nothing' doesn't exist on the Hub")
    with pytest.raises(DataError, match=r"^hub:nobody/nothing\[train\]: cannot load it \(FileNotFoundError: "
                                         r".*check the dataset id"):
        read_hub_table("nobody/nothing", "train", None, "text", None, "label")
    monkeypatch.setitem(sys.modules, "datasets", None)  # makes `import datasets` raise ImportError
    needs = re.escape("hub:glue/sst2 needs the 'datasets' package: pip install 'bert-compress[hub]'")
    with pytest.raises(DataError, match=needs):
        read_hub_table("glue/sst2", "train", None, "sentence", None, "label")
    with pytest.raises(DataError, match=re.escape("hub:conll2003 needs the 'datasets' package")):
        read_hub_tagged("conll2003", "train", None, "tokens", "ner_tags")


def test_hub_tagged(fake_hub):
    names = ["O", "B-PER", "I-PER"]
    fake_hub.dataset = FakeDataset({"tokens": Sequence(None), "ner_tags": Sequence(ClassLabel(names))},
                                   [{"tokens": ["Peter", "Blackburn"], "ner_tags": [1, 2]},
                                    {"tokens": ["hi"], "ner_tags": [0]},
                                    {"tokens": ["a", "b"], "ner_tags": [0]}])
    rows = read_hub_tagged("eriktks/conll2003", "validation", None, "tokens", "ner_tags")
    assert [next(rows), next(rows)] == [TaggedRow(0, ("Peter", "Blackburn"), ("B-PER", "I-PER")),
                                        TaggedRow(1, ("hi",), ("O",))]
    with pytest.raises(DataError, match=r"^hub:eriktks/conll2003\[validation\] row 2: 2 token\(s\) .* but 1 tag\(s\)"):
        next(rows)
    fake_hub.dataset = FakeDataset({"tokens": None, "ner_tags": Sequence(ClassLabel(names))},
                                   [{"tokens": ["x"], "ner_tags": [7]}])
    with pytest.raises(DataError, match=r"row 0: item 0 of 'ner_tags' is an integer; .* or an id in 0\.\.2"):
        list(read_hub_tagged("eriktks/conll2003", "validation", None, "tokens", "ner_tags"))


# --- the real shared files ---------------------------------------------------------------------

def shared(relative: str) -> Path:
    path = SHARED_DATA / relative
    if not path.is_file():
        pytest.skip(f"{path} is not here (the shared data lies beside the checkout on project machines)")
    return path


def test_shared_banking77_csv():
    rows = list(read_table(shared("banking77/train.csv"), "csv", text="text", text_pair=None, label="category"))
    assert len(rows) == 10_003
    assert len({r.label for r in rows}) == 77
    assert rows[0] == Row(2, "I am still waiting on my card?", None, "card_arrival")
    assert any("\n" in r.text for r in rows)  # quoted line breaks survive, as in the source
    assert rows[-1].line > 10_004  # those line breaks push record starts past the row count


def test_shared_ncbi_disease_tsv_is_tagged():
    path = shared("ncbi_disease/train.tsv")
    sentences = list(read_tagged(path, format_of(path, None, tagging=True)))
    assert len(sentences) == 5_424
    assert {t for s in sentences for t in s.tags} <= {"O", "B-Disease", "I-Disease"}
    assert sum(s.tags.count("B-Disease") for s in sentences) == 5_134
    assert sentences[0].line == 1


def test_shared_mrpc_dev_tsv():
    rows = list(read_table(shared("mrpc/dev.tsv"), "tsv", text="#1 String", text_pair="#2 String", label="Quality"))
    assert len(rows) == 408
    assert {r.label for r in rows} == {"0", "1"}
    assert all(r.text_pair for r in rows)
    assert any('"' in r.text_pair for r in rows)  # quotes stay ordinary characters
