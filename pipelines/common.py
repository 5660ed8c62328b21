"""What every stage entry point shares: paths, params loading and error reporting."""
from __future__ import annotations

import errno
import sys
from pathlib import Path

from compress.config import load_params
from compress.errors import UserError

PREPARED = Path("data/prepared")
CACHE = Path("data/teacher_logits")  # teacher outputs on the transfer set
MODELS = Path("models")
REPORTS = Path("reports")
PLOTS = REPORTS / "plots"


WRITE_ERRORS = {
    errno.ENOSPC: "free some disk space (models/, the DVC cache and the temporary copies need room)",
    errno.EDQUOT: "free some space within your disk quota",
    errno.EACCES: "make the output directory writable",
    errno.EPERM: "make the output directory writable",
    errno.EROFS: "the file system is read-only: run from a writable checkout",
}


def run(stage_main) -> None:
    """Run a stage's main(params); user errors end the stage with a one-line message.

    A full disk or an unwritable output is a user error too: the message names the path
    and the fix. Outputs are written to temporary siblings and moved into place only when
    complete (compress.io), so what an earlier run built is still there, unchanged."""
    try:
        stage_main(load_params())
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except OSError as e:
        if e.errno not in WRITE_ERRORS:
            raise
        print(f"error: cannot write {e.filename or 'an output'}: {e.strerror}; {WRITE_ERRORS[e.errno]}. "
              "Nothing already built was replaced.", file=sys.stderr)
        sys.exit(2)
