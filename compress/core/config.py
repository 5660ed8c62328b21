"""Validated configuration dataclasses.

Every stage reads one section of params.yaml into one of these. Building a config
rejects unknown keys (suggesting the nearest valid one), wrong types and illegal
values, so a typo in params.yaml fails before any work starts and names the key.
"""
from __future__ import annotations

import dataclasses
import difflib
import types
import typing
from pathlib import Path
from typing import Any

import yaml

from compress.core.errors import UserError


class ConfigError(UserError):
    """A params value is missing, unknown, of the wrong type or out of range."""


def _type_ok(value: Any, hint: Any) -> bool:
    origin = typing.get_origin(hint)
    if hint is Any:
        return True
    if origin in (typing.Union, types.UnionType):
        return any(_type_ok(value, h) for h in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if origin is dict:
        if not isinstance(value, dict):
            return False
        args = typing.get_args(hint)
        if not args:
            return True
        return all(_type_ok(k, args[0]) and _type_ok(v, args[1]) for k, v in value.items())
    if origin in (list, tuple):
        if not isinstance(value, (list, tuple)):
            return False
        args = typing.get_args(hint)
        if origin is tuple and args and args[-1] is not Ellipsis:
            return len(value) == len(args) and all(_type_ok(v, h) for v, h in zip(value, args))
        inner = args[0] if args else Any
        return all(_type_ok(v, inner) for v in value)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if isinstance(hint, type):
        return isinstance(value, hint)
    return True


def _type_name(hint: Any) -> str:
    return getattr(hint, "__name__", None) or str(hint).replace("typing.", "")


def build(cls, data: dict | None, section: str):
    """Build dataclass `cls` from `data`, the params.yaml section named `section`."""
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise ConfigError(f"params section '{section}' must be a mapping, got {type(data).__name__}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = typing.get_type_hints(cls)
    for key in data:
        if key not in fields:
            near = difflib.get_close_matches(str(key), list(fields), n=1)
            hint = f" Did you mean '{near[0]}'?" if near else ""
            raise ConfigError(
                f"unknown key '{section}.{key}'.{hint} Valid keys: {', '.join(sorted(fields))}"
            )
    kwargs = {}
    for name, f in fields.items():
        if name in data:
            value = data[name]
            if dataclasses.is_dataclass(hints[name]):  # a nested section, e.g. teacher.train
                kwargs[name] = build(hints[name], value, f"{section}.{name}")
                continue
            if not _type_ok(value, hints[name]):
                raise ConfigError(
                    f"'{section}.{name}' must be {_type_name(hints[name])}, "
                    f"got {value!r} ({type(value).__name__})"
                )
            if isinstance(value, int) and hints[name] is float:
                value = float(value)
            kwargs[name] = value
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"missing required key '{section}.{name}'")
    try:
        return cls(**kwargs)
    except ConfigError as e:
        raise ConfigError(f"{section}: {e}") from None


def check(condition: bool, message: str) -> None:
    if not condition:
        raise ConfigError(message)


def load_params(path: str | Path = "params.yaml") -> dict:
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: params file not found (run from the repository root)")
    with open(path, encoding="utf-8") as f:
        params = yaml.safe_load(f) or {}
    if not isinstance(params, dict):
        raise ConfigError(f"{path}: top level must be a mapping of stage sections")
    return params


# Key inside a params section holding per-task overrides of that section, e.g.
#   teacher:
#     max_length: 64
#     by_task:
#       my_task: {max_length: 128, train: {epochs: null, max_steps: 575}}
# The active task is `prepare.task`; its block is merged over the section (nested mappings
# key by key), so `-S prepare.task=my_task` alone switches every stage to that recipe.
PRESETS_KEY = "by_task"


def merge(base: dict, override: dict) -> dict:
    """`base` with `override` merged in: mappings merged key by key, other values replaced."""
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def active_task(params: dict) -> str:
    """prepare.task: the dataset whose `by_task` presets apply ('' when params name none)."""
    prep = params.get("prepare") or {}
    return str(prep.get("task") or "") if isinstance(prep, dict) else ""


def task_names(params: dict) -> tuple[str, ...]:
    """The datasets params declare: every `prepare.by_task` key (each names a dataset and
    its kind, files and columns), and the active `prepare.task`."""
    prep = params.get("prepare") or {}
    presets = prep.get(PRESETS_KEY) if isinstance(prep, dict) else None
    names = list(presets) if isinstance(presets, dict) else []
    task = active_task(params)
    return tuple(names + ([task] if task and task not in names else []))


def resolve_preset(data: dict | None, name: str, task: str, known: tuple[str, ...] | None = None) -> dict | None:
    """Section `name` as the stage sees it for `task`: the `by_task` block of that task
    merged over the base keys, and the `by_task` key itself removed. With `known`, a
    preset for a task params do not declare is refused (a typo would silently be unused)."""
    if not isinstance(data, dict) or PRESETS_KEY not in data:
        return data
    data = dict(data)
    presets = data.pop(PRESETS_KEY) or {}
    if not isinstance(presets, dict):
        raise ConfigError(f"'{name}.{PRESETS_KEY}' must map task names to overrides, got {presets!r}")
    for key, block in presets.items():
        if known is not None and key not in known:
            raise ConfigError(f"unknown task '{name}.{PRESETS_KEY}.{key}': the tasks declared under "
                              f"prepare.{PRESETS_KEY} are {', '.join(known)}")
        if not isinstance(block, dict):
            raise ConfigError(f"'{name}.{PRESETS_KEY}.{key}' must be a mapping of {name} keys, got {block!r}")
    return merge(data, presets.get(task) or {})


def section(params: dict, name: str, cls, override: dict | None = None):
    """Build config `cls` from section `name` of already-loaded params, with the active
    task's preset (`<section>.by_task.<prepare.task>`) applied, then `override` (keys of
    the section, as a sweep sets them: they win over the preset, which wins over the base)."""
    data = resolve_preset(params.get(name), name, active_task(params), task_names(params))
    if override:
        data = merge(data or {}, override)
    return build(cls, data, name)
