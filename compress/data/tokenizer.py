"""A saved fast tokenizer loaded with the `tokenizers` library alone: what the ONNX Runtime
and OpenVINO runners use, so `compress predict` on those artifacts imports neither
transformers nor torch (transformers imports torch whenever it is installed).

In:  a directory holding tokenizer.json (and tokenizer_config.json), as every artifact
     directory of this project does (`save_pretrained` of a fast tokenizer).
Out: an object with the subset of the Hugging Face tokenizer API the encoders use
     (compress.data.tokens, compress.tasks.iob): calling it on texts, text pairs or
     pre-split words, `word_ids()`, `model_max_length`, the special token ids and
     `backend_tokenizer`. Its ids equal transformers' for the same files: HF's fast
     tokenizers run this same Rust tokenizer with `longest_first` truncation, no padding.
Refused: a directory without tokenizer.json (ModelError naming it); `load_tokenizer` of
     compress.training.models, which takes a slow or Hub tokenizer too, is the fallback.
"""
from __future__ import annotations

import json
from pathlib import Path

from compress.core.errors import UserError

VERY_LARGE = int(1e30)  # transformers' model_max_length when a config names none


class TokenizerError(UserError):
    """A directory's tokenizer cannot be loaded without transformers."""


class _Encoded(dict):
    """One call's output: a dict of lists, plus word_ids() of the first row."""

    def __init__(self, data: dict, encodings: list):
        super().__init__(data)
        self._encodings = encodings

    def word_ids(self, row: int = 0) -> list[int | None]:
        return self._encodings[row].word_ids


class FastTokenizer:
    def __init__(self, directory: str | Path):
        from tokenizers import Tokenizer

        directory = Path(directory)
        path = directory / "tokenizer.json"
        if not path.is_file():
            raise TokenizerError(f"{path} not found: this directory has no fast tokenizer")
        self.backend_tokenizer = Tokenizer.from_file(str(path))
        cfg_path = directory / "tokenizer_config.json"
        cfg = json.loads(cfg_path.read_text(encoding="utf-8")) if cfg_path.is_file() else {}
        self.model_max_length = int(cfg.get("model_max_length") or VERY_LARGE)
        for role, default in (("cls", "[CLS]"), ("sep", "[SEP]"), ("pad", "[PAD]"), ("unk", "[UNK]")):
            token = cfg.get(f"{role}_token", default)
            token = token.get("content") if isinstance(token, dict) else token
            setattr(self, f"{role}_token", token)
            setattr(self, f"{role}_token_id", self.backend_tokenizer.token_to_id(token) if token else None)

    def __call__(self, text, text_pair=None, truncation: bool | str = False, max_length: int | None = None,
                 is_split_into_words: bool = False, add_special_tokens: bool = True,
                 return_token_type_ids: bool = True, return_attention_mask: bool = True) -> _Encoded:
        tok = self.backend_tokenizer
        if truncation and max_length:  # True means longest_first, as in transformers
            tok.enable_truncation(max_length, strategy="longest_first")
        else:
            tok.no_truncation()
        tok.no_padding()
        single = is_split_into_words or isinstance(text, str)
        batch = [text] if single else list(text)
        if text_pair is not None:
            pairs = [text_pair] if single else list(text_pair)
            inputs = list(zip(batch, pairs))
        else:
            inputs = batch
        encodings = tok.encode_batch(inputs, is_pretokenized=is_split_into_words, add_special_tokens=add_special_tokens)
        data = {"input_ids": [e.ids for e in encodings]}
        if return_token_type_ids:
            data["token_type_ids"] = [e.type_ids for e in encodings]
        if return_attention_mask:
            data["attention_mask"] = [e.attention_mask for e in encodings]
        if single:
            data = {k: v[0] for k, v in data.items()}
        return _Encoded(data, encodings)


def load_fast_tokenizer(directory: str | Path):
    """FastTokenizer of the directory; transformers' tokenizer when it has no tokenizer.json."""
    if (Path(directory) / "tokenizer.json").is_file():
        return FastTokenizer(directory)
    from compress.training.models import load_tokenizer

    return load_tokenizer(directory)
