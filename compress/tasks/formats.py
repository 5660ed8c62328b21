"""Streaming readers of users' labelled data files.

In: a local file in one of FORMATS (csv, tsv, jsonl, conll) or a Hugging Face Hub dataset,
plus the names of the columns (or JSON keys) holding the text, the optional second text and
the label, or the tokens and tags. Out: `Row`s (text, text pair, raw string label) or
`TaggedRow`s (words, tags), one at a time, so memory stays bounded for any file size.
Labels stay strings here; mapping them to ids is the caller's job.

Anything malformed (not UTF-8, a missing column or key, a wrong field count, an empty text or
label, a label that is not a string, integer or boolean, an unclosed CSV quote, a line that
is not one JSON object, a blank line inside TSV data, a CoNLL line without a tag, unequal
token and tag lists) raises DataError starting `path:line: ` (the 1-based physical line where
the record starts; `hub:<id>[<split>] row <i>` for Hub rows) and saying how to fix it.
"""
from __future__ import annotations

import csv
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from compress.core.errors import DataError

FORMATS = ("csv", "tsv", "jsonl", "conll")

_BY_EXTENSION = {".csv": "csv", ".jsonl": "jsonl", ".json": "jsonl", ".tsv": "tsv", ".txt": "conll",
                 ".conll": "conll", ".iob": "conll", ".bio": "conll", ".iob2": "conll"}
_CONLL_SEP = re.compile(r"[ \t]+")  # not str.split(): a token may be a non-ASCII space


@dataclass(frozen=True)
class Row:
    """One labelled text (or text pair)."""
    line: int  # 1-based line where the record starts; for Hub rows, the row index
    text: str
    text_pair: str | None
    label: str


@dataclass(frozen=True)
class TaggedRow:
    """One sentence of a token-tagging file."""
    line: int  # line of its first token; for Hub rows, the row index
    words: tuple[str, ...]
    tags: tuple[str, ...]
    token_lines: bool = False  # True: token i is on line `line + i` (CoNLL columns)


def format_of(path: str | Path, fmt: str | None, tagging: bool) -> str:
    """`fmt` when given, else the format the file's extension implies."""
    if fmt is not None:
        if fmt not in FORMATS:
            raise DataError(f"unknown data format {fmt!r}: choose one of {', '.join(FORMATS)}")
        return fmt
    ext = Path(path).suffix.lower()
    if ext == ".tsv" and tagging:
        return "conll"  # NCBI-disease and other biomedical corpora ship token<TAB>tag as .tsv
    if ext in _BY_EXTENSION:
        return _BY_EXTENSION[ext]
    raise DataError(f"{path}: cannot tell the format from the extension '{ext or '(none)'}'; "
                    f"set prepare.format to one of {', '.join(FORMATS)}")


def read_table(path: str | Path, fmt: str, text: str, text_pair: str | None, label: str) -> Iterator[Row]:
    """Rows of a csv, tsv or jsonl file; columns are found by header name (csv/tsv) or key (jsonl)."""
    path = _existing(path)
    if fmt == "csv":
        return _table(path, _csv_records(path), text, text_pair, label,
                      "; quote a field that holds a comma, like \"a, b\"")
    if fmt == "tsv":
        return _table(path, _tsv_records(path), text, text_pair, label,
                      "; a sentence may contain a tab: remove it, or convert the file to csv or jsonl")
    if fmt == "jsonl":
        objects = _json_objects(path, [c for c in (text, text_pair, label) if c is not None])
        return (_row(f"{path}:{n}", n, obj, text, text_pair, label, obj[label]) for n, obj in objects)
    raise DataError(f"{path}: a text-classification file must be csv, tsv or jsonl, not {fmt!r}; "
                    "set prepare.format")


def read_tagged(path: str | Path, fmt: str, tokens: str = "tokens", tags: str = "tags") -> Iterator[TaggedRow]:
    """Sentences of a conll or jsonl file. For conll, `tokens`/`tags` are ignored: the token is
    a line's first field and the tag its last."""
    path = _existing(path)
    if fmt == "conll":
        return _conll(path)
    if fmt == "jsonl":
        return (_tagged(f"{path}:{n}", n, obj, tokens, tags, None) for n, obj in _json_objects(path, [tokens, tags]))
    raise DataError(f"{path}: a token-tagging file must be conll or jsonl, not {fmt!r}; set prepare.format")


def read_hub_table(dataset_id: str, split: str, revision: str | None, text: str, text_pair: str | None,
                   label: str) -> Iterator[Row]:
    """Rows of a Hub dataset split; integer labels of a ClassLabel feature become their names."""
    columns = [c for c in (text, text_pair, label) if c is not None]
    ds = _hub_dataset(dataset_id, split, revision, columns)
    names = getattr(ds.features[label], "names", None)

    def rows() -> Iterator[Row]:
        for i, rec in enumerate(ds):
            where = f"hub:{dataset_id}[{split}] row {i}"
            value = rec[label]
            if names and isinstance(value, int) and not isinstance(value, bool):
                if not 0 <= value < len(names):
                    raise DataError(f"{where}: label id {value} is not a class of '{label}' (0..{len(names) - 1}); "
                                    "unlabelled splits (GLUE's test, label -1) cannot be used for training or scoring")
                value = names[value]
            yield _row(where, i, rec, text, text_pair, label, value)
    return rows()


def read_hub_tagged(dataset_id: str, split: str, revision: str | None, tokens: str, tags: str) -> Iterator[TaggedRow]:
    """Sentences of a Hub dataset split; tag ids of a Sequence(ClassLabel) feature become their names."""
    ds = _hub_dataset(dataset_id, split, revision, [tokens, tags])
    names = getattr(getattr(ds.features[tags], "feature", None), "names", None)

    def rows() -> Iterator[TaggedRow]:
        for i, rec in enumerate(ds):
            yield _tagged(f"hub:{dataset_id}[{split}] row {i}", i, rec, tokens, tags, names)
    return rows()


# --- reading lines -----------------------------------------------------------------------

def _existing(path: str | Path) -> Path:
    # Checked before the first row is asked for, so a wrong path fails at the call.
    path = Path(path)
    if path.is_dir():
        raise DataError(f"{path}: is a directory, not a data file; name the file itself")
    if not path.is_file():
        raise DataError(f"{path}: file not found; check the path (prepare.source)")
    return path


def _lines(path: Path) -> Iterator[tuple[int, str]]:
    """(line number, decoded line with its line ending). Decoding one line at a time names the
    line of a bad byte exactly; splitting bytes on \\n is safe since UTF-8 never puts 0x0A
    inside a multi-byte character."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise DataError(f"{path}:{lineno}: not valid UTF-8 (byte 0x{raw[e.start]:02x} at byte "
                                f"{e.start + 1} of the line); save the file as UTF-8") from None
            if lineno == 1 and line.startswith("\ufeff"):
                line = line[1:]  # byte-order mark (Excel's and MRPC's files start with one)
            yield lineno, line


def _csv_records(path: Path) -> Iterator[tuple[int, list[str]]]:
    """(start line, fields) per CSV record, header first. Blank lines are skipped."""
    # The reader pulls one physical line at a time from _lines, so line_num + 1 before each
    # record is the line where that record starts, however many line breaks it quotes.
    reader = csv.reader((line for _, line in _lines(path)), strict=True)
    while True:
        start = reader.line_num + 1
        try:
            fields = next(reader)
        except StopIteration:
            return
        except csv.Error as e:
            if "unexpected end of data" in str(e):
                raise DataError(f"{path}:{start}: a quoted field opened in this record is never closed; "
                                "close the quote, and double any quote inside a field (\"\")") from None
            if "new-line character" in str(e):
                raise DataError(f"{path}:{start}: a line ends with a bare carriage return (\\r); "
                                "save the file with \\n or \\r\\n line endings") from None
            raise DataError(f"{path}:{start}: malformed CSV ({e}); a field holding quotes must be quoted "
                            "whole, with each inner quote doubled: \"say \"\"hi\"\"\"") from None
        if fields:
            yield start, fields


def _tsv_records(path: Path) -> Iterator[tuple[int, list[str]]]:
    """(line, fields) per TSV line, header first. Quotes are ordinary characters (GLUE's MRPC
    holds unbalanced ones), so a record is exactly one line."""
    blank = None
    for lineno, line in _lines(path):
        line = line.rstrip("\r\n")
        if not line.strip():
            blank = blank or lineno  # harmless at the end of the file; an error if rows follow
            continue
        if blank is not None:
            where = "before the header" if blank == 1 else "inside the data"
            raise DataError(f"{path}:{blank}: empty line {where} (the next row is on line {lineno}); delete it")
        yield lineno, line.split("\t")


def _table(path: Path, records: Iterable[tuple[int, list[str]]], text: str, text_pair: str | None,
           label: str, hint: str) -> Iterator[Row]:
    records = iter(records)
    header_line, header = next(records, (1, None))
    if header is None:
        raise DataError(f"{path}:1: the file is empty; it needs a header row naming the columns")
    names = [h.strip() for h in header]
    wanted = [c for c in (text, text_pair, label) if c is not None]
    missing = [c for c in wanted if c not in names]
    if missing:
        raise DataError(f"{path}:{header_line}: missing column(s) {missing}; the header has {names}; "
                        "set prepare.columns")
    twice = [c for c in wanted if names.count(c) > 1]
    if twice:
        raise DataError(f"{path}:{header_line}: column(s) {twice} appear more than once in the header; rename them")
    col = {c: names.index(c) for c in wanted}
    for lineno, fields in records:
        if len(fields) != len(names):
            raise DataError(f"{path}:{lineno}: {len(fields)} field(s), but the header has {len(names)}{hint}")
        rec = {c: fields[i] for c, i in col.items()}
        yield _row(f"{path}:{lineno}", lineno, rec, text, text_pair, label, rec[label])


def _json_objects(path: Path, keys: list[str]) -> Iterator[tuple[int, dict]]:
    for lineno, line in _lines(path):
        if not line.strip():
            continue
        try:
            obj = json.loads(line.rstrip("\r\n"))  # so the column of an error is on this line
        except json.JSONDecodeError as e:
            raise DataError(f"{path}:{lineno}: not valid JSON ({e.msg} at column {e.colno}); each line must "
                            "hold one JSON object (JSON lines, not one JSON array)") from None
        if not isinstance(obj, dict):
            raise DataError(f"{path}:{lineno}: expected a JSON object {{...}}, found {_kind(obj)}; "
                            "each line must hold one object")
        missing = [k for k in keys if k not in obj]
        if missing:
            raise DataError(f"{path}:{lineno}: missing key(s) {missing}; the object has {list(obj)}; "
                            "set prepare.columns")
        yield lineno, obj


def _conll(path: Path) -> Iterator[TaggedRow]:
    words: list[str] = []
    tags: list[str] = []
    first = 0
    for lineno, line in _lines(path):
        fields = _CONLL_SEP.split(line.strip(" \t\r\n"))
        if fields == [""] or fields[0] == "-DOCSTART-":  # a blank line or a document marker ends a sentence
            if words:
                yield TaggedRow(first, tuple(words), tuple(tags), token_lines=True)
            words, tags = [], []
            continue
        if len(fields) < 2:
            raise DataError(f"{path}:{lineno}: expected a token and its tag separated by spaces or a tab, "
                            f"found {fields[0]!r}; add the tag (e.g. O), or end the sentence with an empty line")
        if not words:
            first = lineno
        words.append(fields[0])
        tags.append(fields[-1])  # CoNLL-2003's 4-column files put POS and chunk tags in between
    if words:  # the last sentence needs no blank line after it
        yield TaggedRow(first, tuple(words), tuple(tags), token_lines=True)


# --- checking values -----------------------------------------------------------------------

def _kind(value: object) -> str:
    """A value's type in JSON's words, for messages."""
    if value is None:
        return "null"
    return {bool: "a boolean", int: "an integer", float: "a number with a fraction", str: "a string",
            list: "a list", dict: "an object"}.get(type(value), type(value).__name__)


def _row(where: str, line: int, rec: dict, text: str, text_pair: str | None, label: str, value: object) -> Row:
    texts = [_text(where, rec[text], text)]
    if text_pair is not None:
        texts.append(_text(where, rec[text_pair], text_pair))
    # bool before int: JSON true is a Python int too; both are fine as class names.
    if isinstance(value, (bool, int)):
        value = str(value)
    elif not isinstance(value, str):
        raise DataError(f"{where}: the label in '{label}' is {_kind(value)}; a label must be a string or an "
                        "integer (class names or ids; regression targets are not supported)")
    value = value.strip()  # "pos " and "pos" must not become two classes
    if not value:
        raise DataError(f"{where}: empty label in '{label}'; fill it in or delete the row")
    return Row(line, texts[0], texts[1] if len(texts) > 1 else None, value)


def _text(where: str, value: object, column: str) -> str:
    if not isinstance(value, str):
        raise DataError(f"{where}: the text in '{column}' is {_kind(value)}; it must be a string")
    if not value.strip():
        raise DataError(f"{where}: empty text in '{column}'; fill it in or delete the row")
    return value


def _tagged(where: str, line: int, rec: dict, tokens: str, tags: str, names: list[str] | None) -> TaggedRow:
    words = _strings(where, rec[tokens], tokens, None)
    labels = _strings(where, rec[tags], tags, names)
    if not words:
        raise DataError(f"{where}: '{tokens}' is empty; a sentence needs at least one token (delete the row)")
    if len(words) != len(labels):
        raise DataError(f"{where}: {len(words)} token(s) in '{tokens}' but {len(labels)} tag(s) in '{tags}'; "
                        "give exactly one tag per token")
    return TaggedRow(line, words, labels)


def _strings(where: str, value: object, key: str, names: list[str] | None) -> tuple[str, ...]:
    """A list of non-empty strings; integer items become names[id] when names are known."""
    if not isinstance(value, (list, tuple)):
        raise DataError(f"{where}: '{key}' is {_kind(value)}; it must be a list of strings")
    out = []
    for j, item in enumerate(value):
        if names and isinstance(item, int) and not isinstance(item, bool) and 0 <= item < len(names):
            item = names[item]
        if not isinstance(item, str) or not item.strip():
            shown = "an empty string" if isinstance(item, str) else _kind(item)
            raise DataError(f"{where}: item {j} of '{key}' is {shown}; each must be a non-empty string"
                            + (f" or an id in 0..{len(names) - 1}" if names else ""))
        out.append(item)
    return tuple(out)


def _hub_dataset(dataset_id: str, split: str, revision: str | None, columns: list[str]):
    try:
        import datasets  # optional: only Hub sources need it
    except ImportError:
        raise DataError(f"hub:{dataset_id} needs the 'datasets' package: pip install 'bert-compress[hub]'") from None
    # GLUE moved to nyu-mll/glue; "glue/<name>" stays the short spelling of its configs.
    args = ("nyu-mll/glue", dataset_id[5:]) if dataset_id.startswith("glue/") else (dataset_id,)
    try:
        ds = datasets.load_dataset(*args, split=split, revision=revision)
    except (OSError, ValueError) as e:  # unknown id (a FileNotFoundError), unknown split or config, offline
        raise DataError(f"hub:{dataset_id}[{split}]: cannot load it ({type(e).__name__}: {e}); check the "
                        "dataset id, split and revision, and that the Hub is reachable") from e
    missing = [c for c in columns if c not in ds.features]
    if missing:
        raise DataError(f"hub:{dataset_id}[{split}]: missing column(s) {missing}; the dataset has "
                        f"{list(ds.features)}; set prepare.columns")
    return ds
