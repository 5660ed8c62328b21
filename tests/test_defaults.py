"""One source of truth for config: every config dataclass's defaults are the committed
params.yaml's base values (presets aside), so a user of the library API gets the pipeline
`dvc repro` runs."""
import dataclasses

import yaml

from compress.core.config import build
from conftest import REPO
from test_reliability import SECTIONS


def _differences(default, committed, path: str) -> list[str]:
    out = []
    for f in dataclasses.fields(default):
        a, b = getattr(default, f.name), getattr(committed, f.name)
        if dataclasses.is_dataclass(a):
            out += _differences(a, b, f"{path}.{f.name}")
        elif a != b:
            out.append(f"{path}.{f.name}: dataclass default {a!r}, params.yaml {b!r}")
    return out


def test_dataclass_defaults_are_the_committed_params():
    params = yaml.safe_load((REPO / "params.yaml").read_text())
    assert set(SECTIONS) <= set(params)
    found = []
    for name, cls in SECTIONS.items():
        base = {k: v for k, v in (params[name] or {}).items() if k != "by_task"}
        # fields without a default (prepare.task, prepare.source: which data) come from params
        required = {f.name: base[f.name] for f in dataclasses.fields(cls)
                    if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
        found += _differences(cls(**required), build(cls, base, name), name)
    assert not found, "defaults disagree with params.yaml:\n" + "\n".join(found)
