"""Which model files are bit-identical between two pipeline runs? Compares the sha256 of
every file under <run>/models/ and <run>/data/ of two run directories (e.g. the tiny
end-to-end repro on two commits, `tests/e2e.py`), file by file: a changed config.json
beside identical weights shows as such, where dvc.lock's directory hashes only say
"differs".

    python benchmarks/model_hashes.py OLD_RUN_DIR NEW_RUN_DIR [--json out.json]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path


def hashes(root: Path) -> dict[str, str]:
    out = {}
    for top in ("models", "data"):
        for f in sorted((root / top).rglob("*")):
            if f.is_file():
                out[str(f.relative_to(root))] = hashlib.sha256(f.read_bytes()).hexdigest()
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    a, b = hashes(Path(args.old)), hashes(Path(args.new))
    res = {"same": sorted(p for p in a.keys() & b.keys() if a[p] == b[p]),
           "differ": sorted(p for p in a.keys() & b.keys() if a[p] != b[p]),
           "only_old": sorted(a.keys() - b.keys()), "only_new": sorted(b.keys() - a.keys())}
    for key, paths in res.items():
        print(f"{key}: {len(paths)}")
        for p in paths if key != "same" else []:
            print(f"  {p}")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
