"""optimum-intel's route of the openvino check, built from the float checkpoint:

  1. ``OVModelForSequenceClassification.from_pretrained(model, export=True)``: FP32 IR
     (weights kept FP32);
  2. ``OVQuantizer(fp32 model).quantize(calibration_dataset=nncf.Dataset(rows),
     ov_config=OVConfig(quantization_config=OVQuantizationConfig(num_samples=N)))``: NNCF
     static post-training quantization with optimum-intel's defaults (preset "mixed": INT8
     weights symmetric per-channel, activations asymmetric; model_type transformer, so
     SmoothQuant; fast bias correction), calibrated on ``--calibration-rows`` TRAINING rows
     (the same seeded sample as the project's INT8 IR) padded to ``--eval-max-length``
     tokens, optimum-intel's documented text-classification recipe.

Refused: optimum-intel / nncf / openvino not installed, an empty training split
(InputError); any failure inside optimum-intel (PeerBuildError).
"""
from __future__ import annotations

import logging
import shutil
from pathlib import Path

import numpy as np

from .common import INSTALL_HINT, InputError, PeerBuildError, plain

OV_SEED = 0  # the calibration sample of the training split (compress.backends.openvino_ir's default seed)


def import_optimum_intel():
    """optimum-intel's entry points, imported only here so --help works without the extra."""
    try:
        import nncf  # noqa: F401
        import openvino  # noqa: F401
        from optimum.intel import OVConfig, OVModelForSequenceClassification, OVQuantizationConfig, OVQuantizer
    except ImportError as e:
        raise InputError(f"optimum-intel's OpenVINO route is not installed ({e}); install it with: "
                         f"{INSTALL_HINT}") from None
    quiet = logging.getLogger("optimum.intel.openvino.modeling_base")
    if not any(isinstance(f, _LocalDirCheckFilter) for f in quiet.filters):
        quiet.addFilter(_LocalDirCheckFilter())
    return OVModelForSequenceClassification, OVQuantizer, OVConfig, OVQuantizationConfig


class _LocalDirCheckFilter(logging.Filter):
    """Offline, optimum-intel 1.27's from_pretrained looks a local directory up in the Hub cache
    first and warns "Could not infer whether the model was already converted ..." although the
    explicit export= it then keeps is right; that warning only confuses a reader here."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Could not infer whether the model was already converted" not in record.getMessage()


def calibration_rows(prepared, tokenizer, rows: int, max_length: int) -> list[dict[str, np.ndarray]]:
    """`rows` TRAINING rows drawn by the project's one calibration sampler
    (Prepared.calibration_rows) with the OpenVINO stage's default seed, so on a large
    training split they are the rows the project's INT8 IR calibrates on (random.sample's
    draw there is the same prefix whatever the count), each one item (1, max_length) padded
    to max_length as optimum-intel's documented text-classification recipe does
    (padding="max_length")."""
    from compress.data.tokens import collate, encode

    train = prepared.calibration_rows(rows, OV_SEED)
    if not train:
        raise InputError("the training split is empty: nothing to calibrate optimum-intel's INT8 on")
    enc = encode(tokenizer, train, max_length)
    return [collate(enc, [j], pad_to=max_length) for j in range(len(enc))]


def build_optimum_intel(model_dir: Path, work_dir: Path, tokenizer, calibration: list[dict]) -> dict:
    """optimum-intel's FP32 IR export of model_dir and its static INT8 (OVQuantizer, NNCF PTQ on
    `calibration`). Each directory holds openvino_model.xml/.bin, config.json and the tokenizer.
    Returns the directories and the exact options used."""
    OVModel, OVQuantizer, OVConfig, OVQuantizationConfig = import_optimum_intel()
    import nncf

    fp32_dir, int8_dir = work_dir / "optimum_intel_ov", work_dir / "optimum_intel_ov_int8"
    for d in (fp32_dir, int8_dir):
        if d.exists():
            shutil.rmtree(d)
    try:
        exported = OVModel.from_pretrained(str(model_dir), export=True, compile=False, local_files_only=True)
        exported.save_pretrained(fp32_dir)
        tokenizer.save_pretrained(fp32_dir)
        del exported
        qconfig = OVQuantizationConfig(num_samples=len(calibration))
        float_model = OVModel.from_pretrained(str(fp32_dir), compile=False, local_files_only=True)
        names = set(float_model.input_names)
        dataset = nncf.Dataset([{k: v for k, v in row.items() if k in names} for row in calibration])
        OVQuantizer(float_model).quantize(calibration_dataset=dataset,
                                          ov_config=OVConfig(quantization_config=qconfig), save_directory=int8_dir)
        tokenizer.save_pretrained(int8_dir)
        nncf_args = qconfig.to_nncf_dict()
    except Exception as e:  # noqa: BLE001 - any failure inside optimum-intel is reported as such
        raise PeerBuildError(f"building optimum-intel's route from {model_dir} failed: "
                             f"{type(e).__name__}: {e}") from e
    for d in (fp32_dir, int8_dir):
        if not (d / "openvino_model.xml").is_file():
            raise PeerBuildError(f"optimum-intel wrote no openvino_model.xml into {d}")
    return {
        "fp32_dir": fp32_dir,
        "int8_dir": int8_dir,
        "export": {"call": "OVModelForSequenceClassification.from_pretrained(model, export=True)",
                   "task": "text-classification", "weights": "fp32 (no compression)"},
        "quantization": {
            "call": "OVQuantizer(fp32 model).quantize(calibration_dataset=nncf.Dataset(rows), ov_config="
                    f"OVConfig(quantization_config=OVQuantizationConfig(num_samples={len(calibration)})))",
            "method": "NNCF static post-training quantization (weights and activations INT8)",
            **{f: plain(getattr(qconfig, f, None)) for f in ("bits", "sym", "dtype", "model_type",
                                                              "fast_bias_correction", "overflow_fix",
                                                              "smooth_quant_alpha", "num_samples")},
            "nncf_preset": plain(getattr(nncf_args.get("preset"), "value", nncf_args.get("preset"))),
            "nncf_subset_size": nncf_args.get("subset_size"),
            "calibration": {"split": "train", "rows": len(calibration), "seed": OV_SEED,
                            "padding": "max_length",
                            "seq_len": int(calibration[0]["input_ids"].shape[1]) if calibration else None},
        },
    }
