"""The peer check's markdown summary: one block per check that ran (the results dict of
benchmarks.peer.cli.run in, text out), as printed and as written into a README block."""
from __future__ import annotations

from .onnx_route import ROUTES
from .openvino_route import OV_PAIRS


def render(res: dict) -> str:
    """A readable summary of every check that ran."""
    parts = []
    if "routes" in res:
        parts.append(render_onnx(res))
    if "openvino" in res:
        parts.append(render_openvino(res))
    return "\n\n".join(parts)


def render_openvino(res: dict) -> str:
    """The openvino check's table: one row per route, project and optimum-intel side by side."""
    ov, env = res["openvino"], res["environment"]
    m, route_info = ov["measure"], ov["optimum_intel_route"]
    q = route_info["quantization"]
    cal = q["calibration"]
    routes = ov["routes"]
    seq, batch = m["seq_len"], m["batch_size"]
    metric_names = [k for k in ("accuracy", "f1") if any(r.get(k) is not None for r in routes.values())]
    num = lambda v, f: "n/a" if v is None else format(v, f)  # noqa: E731

    lines = [
        f"OpenVINO peer check: {res['task']}, {res['dev_rows']} dev rows, openvino {env['openvino']} CPU, "
        f"{m['threads']} inference threads (NUM_STREAMS 1, PERFORMANCE_HINT LATENCY), optimum-intel "
        f"{env['optimum-intel']} / nncf {env['nncf']}; every route measured by {m['harness']} in "
        f"{m['rounds']} interleaved rounds",
        f"optimum-intel route: {route_info['export']['call']} (FP32 IR) -> OVQuantizer static INT8 PTQ, "
        f"OVQuantizationConfig(num_samples={q['num_samples']}) [preset {q['nncf_preset']}, model_type "
        f"{q['model_type']}, fast_bias_correction={q['fast_bias_correction']}], calibrated on {cal['rows']} "
        f"training rows padded to {cal['seq_len']}; compiled with the project's runtime settings per row "
        f"(optimum-intel left to its defaults would run at {route_info.get('default_inference_precision')})",
        f"project route: {ov['project_artifacts']['fp32_dir']}, {ov['project_artifacts']['int8_dir']} via "
        "compress.backends.base.load_runner(Artifact(..., 'openvino', precision)); 'runs at' is the inference "
        "precision each compiled model reports",
        "",
        "| | precision | runs at | " + " | ".join(metric_names)
        + f" | p50 ms (1x{seq}) | seq/s ({batch}x{seq}) | size MiB | agreement with float parent |",
        "|---|---|---|" + "---|" * len(metric_names) + "---|---|---|---|",
    ]
    notes = []
    for _, proj, peer in OV_PAIRS:
        for name in (proj, peer):
            r = routes[name]
            label = f"{'project' if r['side'] == 'project' else 'optimum-intel'} {name}"
            if r["status"] != "ok":
                lines.append(f"| {label} | {r['precision']} | {r['status']} | "
                             + " | ".join("n/a" for _ in metric_names) + " | n/a | n/a | n/a | n/a |")
                notes.append(f"{name} {r['status']}: {r['reason']}")
                continue
            runs_at = r.get("inference", {}).get("INFERENCE_PRECISION_HINT", "?")
            lines.append(
                f"| {label} | {r['precision']} | {runs_at} | "
                + " | ".join(num(r.get(k), ".4f") for k in metric_names)
                + f" | {num(r['latency']['latency_ms_p50'], '.3f')} | "
                f"{num(r['throughput']['throughput_seq_per_s'], '.1f')} | {num(r['size_mb'], '.2f')} | "
                f"{num(r['agreement_with_parent'], '.4f') if r['agreement_with_parent'] is not None else '-'} |")
    lines.append("")
    for pair in ov["pairs"]:
        if pair["status"] != "ok":
            lines.append(f"{pair['precision']}: not compared ({pair['reason']})")
            continue
        delta = pair["accuracy_delta_project_minus_optimum_intel"]
        lines.append(
            f"{pair['precision']}: optimum-intel p50 / project p50 = {pair['p50_ratio_optimum_intel_over_project']:.3f} "
            f"(> 1: project faster; per round {pair['round_p50_ratios']}: {pair['speed']}); project seq/s / "
            f"optimum-intel seq/s = {pair['throughput_ratio_project_over_optimum_intel']:.3f}; prediction "
            f"agreement {pair['prediction_agreement']:.4f} ({pair['disagreements']} rows differ); accuracy "
            f"project - optimum-intel {'n/a' if delta is None else format(delta, '+.4f')}")
    if not ov["project_measured"]:
        lines.append("project side NOT measured: its OpenVINO artifacts are missing (see below); "
                     "only optimum-intel's routes ran")
    lines += [f"- {n}" for n in notes]
    return "\n".join(lines)


def render_onnx(res: dict) -> str:
    """The onnx check's summary table."""
    r, c, env = res["routes"], res["comparison"], res["environment"]
    q = res["optimum_route"]["quantization"]
    lat = {n: r[n]["latency"] for n in ROUTES}
    seq = res["latency_setup"]["seq_len"]
    metric_names = [m for m in ("accuracy", "f1") if m in r["project"]]

    def row(label, fmt, key):
        return f"| {label} | " + " | ".join(fmt(key(n)) for n in ROUTES) + " |"

    ms = lambda v: f"{v:.3f}"  # noqa: E731
    lines = [
        f"Optimum peer check: {res['task']}, {res['dev_rows']} dev rows, "
        f"onnxruntime {env['onnxruntime']} CPUExecutionProvider, {env['threads']} intra-op threads, "
        f"optimum {env['optimum']} / optimum-onnx {env['optimum-onnx']}",
        f"Optimum route: main_export(task={res['optimum_route']['export']['task']}, "
        f"opset {res['optimum_route']['export']['opset']}) -> ORTQuantizer with {q['call']} "
        f"[{q['format']}/{q['mode']}, weights {q['weights_dtype']} "
        f"{'symmetric' if q['weights_symmetric'] else 'asymmetric'} "
        f"{'per-channel' if q['per_channel'] else 'per-tensor'}, activations {q['activations_dtype']} "
        f"{'symmetric' if q['activations_symmetric'] else 'asymmetric'}, reduce_range={q['reduce_range']}]",
        f"CPU: {env['cpu_model']} (avx512_vnni={env['cpu_flags'].get('avx512_vnni')}, "
        f"avx_vnni={env['cpu_flags'].get('avx_vnni')})",
        "",
        "| | project INT8 | Optimum INT8 |",
        "|---|---|---|",
        *[row(m, lambda v: "n/a" if v is None else f"{v:.4f}", lambda n, m=m: r[n][m]) for m in metric_names],
        row(f"p50 ms (1x{seq})", ms, lambda n: lat[n]["latency_ms_p50"]),
        row(f"p90 ms (1x{seq})", ms, lambda n: lat[n]["latency_ms_p90"]),
        row(f"p99 ms (1x{seq})", ms, lambda n: lat[n]["latency_ms_p99"]),
        row("timed queries", str, lambda n: lat[n]["queries"]),
        row("size MiB", lambda v: f"{v:.2f}", lambda n: r[n]["size_mb"]),
        row("opset", str, lambda n: r[n]["opset"]),
        row("agreement with fp32 export", lambda v: f"{v:.4f}", lambda n: r[n]["agreement_with_fp32_export"]),
        "",
        f"float reference (Optimum fp32 export): accuracy {res['reference_fp32_export'].get('accuracy')}, "
        f"{res['reference_fp32_export']['size_mb']:.2f} MiB",
        f"optimum p50 / project p50 = {c['p50_ratio_optimum_over_project']:.3f} "
        f"(> 1: project faster); per round {c['round_p50_ratios']}: {c['speed']}",
        f"prediction agreement {c['prediction_agreement']:.4f} ({c['disagreements']} rows differ: "
        f"project right on {c['disagreements_project_right']}, Optimum right on "
        f"{c['disagreements_optimum_right']}); max |logit diff| {c['max_abs_logit_diff']:.4f}",
        f"project at least as fast: {c['project_at_least_as_fast']}; "
        f"at least as accurate: {c['project_at_least_as_accurate']}",
    ]
    return "\n".join(lines)
