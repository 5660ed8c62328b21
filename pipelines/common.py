"""What every stage entry point shares: paths, params loading and error reporting."""
from __future__ import annotations

import sys
from pathlib import Path

from compress.config import load_params
from compress.errors import UserError

PREPARED = Path("data/prepared")
CACHE = Path("data/teacher_logits")  # teacher outputs on the transfer set
MODELS = Path("models")
REPORTS = Path("reports")
PLOTS = REPORTS / "plots"


def run(stage_main) -> None:
    """Run a stage's main(params); user errors end the stage with a one-line message."""
    try:
        stage_main(load_params())
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
