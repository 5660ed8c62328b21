"""Which pipeline outputs are bit-exact between two runs? Compare the output hashes of two
dvc.lock files (e.g. the committed one and one from a rerun on another clone).

    python benchmarks/lock_diff.py OLD_DVC_LOCK NEW_DVC_LOCK [--json out.json]

Deps are listed as well, so a differing output can be traced to a differing input.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import yaml


def outs(lock: dict) -> dict[str, dict[str, str]]:
    return {name: {o["path"]: o.get("md5") for o in st.get("outs", [])} for name, st in lock["stages"].items()}


def deps(lock: dict) -> dict[str, dict[str, str]]:
    return {name: {d["path"]: d.get("md5") for d in st.get("deps", [])} for name, st in lock["stages"].items()}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("old")
    ap.add_argument("new")
    ap.add_argument("--json")
    args = ap.parse_args(argv)
    a, b = (yaml.safe_load(Path(p).read_text()) for p in (args.old, args.new))
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
    for key in ("same", "differ"):
        print(f"{key}:")
        for r in res[key]:
            extra = f"  (differing deps: {', '.join(r['inputs_that_differ']) or 'none'})" if key == "differ" else ""
            print(f"  {r['stage']}: {r['path']}{extra}")
    if args.json:
        Path(args.json).write_text(json.dumps(res, indent=2) + "\n", encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
