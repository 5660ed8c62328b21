"""The tiny end-to-end repro of one commit (tests/e2e.py `tiny_params`: every stage on a
slice of the real data), in a directory of its own, so that two commits can be compared
file by file with benchmarks/lock_diff.py:

    python benchmarks/tiny_repro.py fc20182 /tmp/tiny_old
    python benchmarks/tiny_repro.py HEAD /tmp/tiny_new
    python benchmarks/lock_diff.py /tmp/tiny_old/run /tmp/tiny_new/run --json out.json

OUT_DIR/src holds the commit's files (`git archive`), OUT_DIR/run the repro, made by that
commit's own tests/e2e.py and run with `dvc repro` as users run it. Compare runs from one
machine only: bf16 autocast and thread counts change training numerics across machines.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

RUN = """
import sys, json
from pathlib import Path
from e2e import copy_repo, dvc, tiny_params
run = Path(sys.argv[1]); run.mkdir()
copy_repo(run, tiny_params(sys.argv[2]))
dvc(run, "repro", timeout=3600)
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("rev")
    ap.add_argument("out", type=Path)
    ap.add_argument("--task", default="sst2")
    args = ap.parse_args()
    if args.out.exists():
        sys.exit(f"{args.out} exists: give a new directory")
    src = args.out / "src"
    src.mkdir(parents=True)
    archive = subprocess.run(["git", "archive", args.rev], cwd=REPO, check=True, capture_output=True).stdout
    subprocess.run(["tar", "-x", "-C", str(src)], input=archive, check=True)
    env = dict(os.environ)
    # the commit's tests find the shared data beside this checkout, not beside OUT_DIR
    env.setdefault("COMPRESS_SHARED_DATA", str(REPO.parent / "shared" / "data"))
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", RUN, str(args.out / "run"), args.task], cwd=src / "tests", env=env,
                   check=True)
    print(f"{args.rev}: tiny {args.task} repro in {args.out / 'run'} ({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
