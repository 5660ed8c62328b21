"""What every stage entry point shares: paths, params loading and error reporting."""
from __future__ import annotations

import errno
import sys
from pathlib import Path
from typing import Callable

from compress.core import distributed
from compress.core.config import load_params, section
from compress.core.distributed import LaunchConfig
from compress.core.errors import UserError

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


def launch_checked(params: dict, batch_size: int, key: str) -> bool:
    """For `run(..., launch=)`: refuse more ranks than rows in a batch (naming `key`)
    before any process starts; true: the stage trains and may run under torchrun."""
    section(params, "launch", LaunchConfig).check_batch(batch_size, key)
    return True


def run(stage_main, launch: Callable[[dict], bool] | None = None) -> None:
    """Run a stage's main(params); user errors end the stage with a one-line message.

    A full disk or an unwritable output is a user error too: the message names the path
    and the fix. Outputs are written to temporary siblings and moved into place only when
    complete (compress.core.io), so what an earlier run built is still there, unchanged.

    Training stages pass `launch(params)`, true when the stage trains: with the `launch`
    section asking for several processes, the stage (started as one process by its
    one-line dvc.yaml command) restarts itself under torchrun, each rank runs main(params)
    and rank 0 writes the outputs."""
    try:
        params = load_params()
        cfg = section(params, "launch", LaunchConfig) if launch else None
        if cfg and cfg.world_size > 1 and launch(params) and not distributed.under_torchrun():
            distributed.relaunch(cfg, sys.modules["__main__"].__spec__.name)
            return
        if cfg and distributed.under_torchrun():
            with distributed.process_group(cfg):
                stage_main(params)
        else:
            stage_main(params)
    except UserError as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
    except OSError as e:
        if e.errno not in WRITE_ERRORS:
            raise
        print(f"error: cannot write {e.filename or 'an output'}: {e.strerror}; {WRITE_ERRORS[e.errno]}. "
              "Nothing already built was replaced.", file=sys.stderr)
        sys.exit(2)
