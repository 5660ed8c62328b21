"""Relative data sources for DVC's queued and temporary experiments.

`dvc exp run --queue` / `--temp` run each experiment in a copy of the repository at
`<checkout>/.dvc/tmp/exps/<tmpdir>/`. A relative `prepare.source` such as
`../shared/data/<task>` is resolved from there, by DVC (the stage's dependency) and by the
stage alike, so it would point into `.dvc/tmp/exps/` instead of beside the checkout.

One symbolic link fixes both without touching the source string (so the data card, and
every stage after it, stay identical to the workspace's): `.dvc/tmp/exps/shared` ->
`<checkout>/../shared`. From any experiment copy, `../shared/...` then reaches the same
files as from the checkout. `make setup` and every workspace `prepare` create it; so does
`compress link-sources`.
"""
from __future__ import annotations

import os
from pathlib import Path, PurePath

from compress.core.errors import UserError

EXPS = Path(".dvc") / "tmp" / "exps"  # dvc.repo.experiments.utils.EXEC_TMP_DIR under .dvc/tmp


def in_experiment_copy(cwd: Path | None = None) -> bool:
    """True inside a queued/temporary experiment's copy (`.../.dvc/tmp/exps/<tmpdir>`)."""
    parts = Path(cwd or Path.cwd()).resolve().parts
    return len(parts) >= 4 and tuple(parts[-4:-1]) == (".dvc", "tmp", "exps")


def link_source(source: str, root: Path | None = None) -> Path | None:
    """Make relative `source` resolve from experiment copies of the checkout at `root` as it
    does from `root`; return the link made (None: nothing to do). Sources inside the
    repository travel with the copy, absolute paths and Hub ids resolve anywhere."""
    root = Path(root or Path.cwd()).resolve()
    if source.startswith("hub:") or PurePath(source).is_absolute():
        return None
    parts = PurePath(source).parts
    ups = next((i for i, p in enumerate(parts) if p != ".."), len(parts))
    if ups == 0:
        return None
    if ups > 2 or ups == len(parts):
        raise UserError(f"prepare.source '{source}': queued/temporary experiments run in "
                        ".dvc/tmp/exps/<tmp> below the checkout and can only be given sources one or two "
                        "levels up ('../x', '../../x'); use an absolute path or data inside the repository")
    # from <root>/.dvc/tmp/exps/<tmp>, '..' is exps and '../..' is .dvc/tmp (both git-ignored)
    base = root / EXPS
    for _ in range(ups - 1):
        base = base.parent
    link = base / parts[ups]
    target = (root / PurePath(*parts[:ups + 1])).resolve()
    if link.is_symlink():
        if link.resolve() == target:
            return link
        link.unlink()
    elif link.exists():
        raise UserError(f"{link} exists and is not a link: cannot make prepare.source '{source}' "
                        "resolve in queued experiments; remove it")
    link.parent.mkdir(parents=True, exist_ok=True)
    os.symlink(target, link, target_is_directory=True)
    return link
