"""Atomic outputs: a stage writes into a temporary sibling and moves it into place at the
end, so a stage that fails or is killed never leaves a half-written artifact that a
later stage (or `dvc repro`) would take as valid."""
from __future__ import annotations

import hashlib
import json
import os
import shutil
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator


def _tmp_sibling(path: Path) -> Path:
    return path.with_name(f"{path.name}.tmp-{os.getpid()}")


def _remove_stale(path: Path) -> None:
    """Remove temporaries left by a killed earlier run (DVC's repo lock means no other
    process is writing this output now)."""
    for stale in [*path.parent.glob(f"{path.name}.tmp-*"), *path.parent.glob(f"{path.name}.old-*")]:
        if stale.is_dir():
            shutil.rmtree(stale, ignore_errors=True)
        else:
            stale.unlink(missing_ok=True)


@contextmanager
def atomic_dir(path: str | Path) -> Iterator[Path]:
    """Yield a fresh temporary directory; on success it replaces `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    _remove_stale(path)
    tmp = _tmp_sibling(path)
    tmp.mkdir()
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    try:
        if path.exists():
            old = path.with_name(f"{path.name}.old-{os.getpid()}")
            os.replace(path, old)
            try:
                os.replace(tmp, path)
            except BaseException:
                os.replace(old, path)  # the move failed: the previous output goes back in place
                raise
            shutil.rmtree(old, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


def atomic_write_text(path: str | Path, text: str) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp_sibling(path)
    try:
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_json(path: str | Path, data) -> None:
    atomic_write_text(path, json.dumps(data, indent=2, sort_keys=False) + "\n")


def replace_block(path: str | Path, start: str, end: str, text: str) -> bool:
    """Replace what lies between the marker lines `start` and `end` in a text file (a
    generated block of a README); True when the file changed."""
    path = Path(path)
    content = path.read_text(encoding="utf-8")
    if start not in content or end not in content:
        raise ValueError(f"{path}: no '{start}' ... '{end}' block to fill")
    head, rest = content.split(start, 1)
    _, tail = rest.split(end, 1)
    new = f"{head}{start}\n{text}\n{end}{tail}"
    if new != content:
        atomic_write_text(path, new)
    return new != content


def sha256_file(path: str | Path) -> str:
    """Hex sha256 of a file's bytes, read in 1 MiB blocks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
