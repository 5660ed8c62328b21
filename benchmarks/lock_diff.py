"""Which pipeline outputs are bit-exact between two runs?

    python benchmarks/lock_diff.py OLD_DVC_LOCK NEW_DVC_LOCK [--json out.json]
    python benchmarks/lock_diff.py OLD_RUN_DIR NEW_RUN_DIR [--json out.json]

Two dvc.lock files (e.g. the committed one and one from a rerun on another clone): the
output hashes per stage, with the deps that differ, so a differing output can be traced
to a differing input. Two run directories (e.g. the tiny end-to-end repro of
`tests/e2e.py` on two commits): the sha256 of every file under models/ and data/, file by
file, so a changed config.json beside identical weights shows as such where dvc.lock's
directory hashes only say "differs".
"""
from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

import yaml


def outs(lock: dict) -> dict[str, dict[str, str]]:
    return {name: {o["path"]: o.get("md5") for o in st.get("outs", [])} for name, st in lock["stages"].items()}


def deps(lock: dict) -> dict[str, dict[str, str]]:
    return {name: {d["path"]: d.get("md5") for d in st.get("deps", [])} for name, st in lock["stages"].items()}


def lock_rows(old: Path, new: Path) -> dict[str, list[dict]]:
    a, b = (yaml.safe_load(p.read_text()) for p in (old, new))
    oa, ob, da, db = outs(a), outs(b), deps(a), deps(b)
    res = {"same": [], "differ": []}
    for stage in ob:
        for path, md5 in ob[stage].items():
            row = {"stage": stage, "path": path}
            if oa.get(stage, {}).get(path) == md5:
                res["same"].append(row)
            else:
                row["inputs_that_differ"] = sorted(p for p, m in db[stage].items() if da.get(stage, {}).get(p) != m)
                res["differ"].append(row)
    return res


def file_hashes(root: Path) -> dict[str, str]:
    return {str(f.relative_to(root)): hashlib.sha256(f.read_bytes()).hexdigest()
            for top in ("models", "data") for f in sorted((root / top).rglob("*")) if f.is_file()}


def file_rows(old: Path, new: Path) -> dict[str, list[dict]]:
    a, b = file_hashes(old), file_hashes(new)
    return {"same": [{"path": p} for p in sorted(a.keys() & b.keys()) if a[p] == b[p]],
            "differ": [{"path": p} for p in sorted(a.keys() & b.keys()) if a[p] != b[p]],
            "only_old": [{"path": p} for p in sorted(a.keys() - b.keys())],
            "only_new": [{"path": p} for p in sorted(b.keys() - a.keys())]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    old, new = Path(args.old), Path(args.new)
    res = file_rows(old, new) if old.is_dir() and new.is_dir() else lock_rows(old, new)
    for key, rows in res.items():
        print(f"{key}: {len(rows)}")
        for r in rows:
            extra = f"  (differing deps: {', '.join(r['inputs_that_differ']) or 'none'})" if "inputs_that_differ" in r else ""
            print(f"  {r['stage'] + ': ' if 'stage' in r else ''}{r['path']}{extra}")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
