"""The Optimum peer check (benchmarks/optimum_peer.py is its command), one concern a module:

  common.py          the two errors (exit statuses 2 and 1), the install hint, JSON-friendly values
  cli.py             the command line: arguments, their checks, the run of every check, main()
  onnx_route.py      the onnx check: optimum-onnx export + ORTQuantizer, measured beside the project's INT8
  graphs.py          ONNX Runtime sessions, dev-split logits, interleaved latency, file sizes
  openvino_build.py  optimum-intel's FP32 IR export and static INT8 (OVQuantizer, NNCF)
  openvino_runtime.py  what each OpenVINO model is compiled with, and what it reports
  runner.py          OptimumIntelRunner, and the backend descriptor its import registers
  openvino_route.py  the openvino check: every route measured by compress.measure.harness.measure
  render.py          the markdown summary

Importing this package registers nothing; only benchmarks.peer.runner registers the peer format
(``optimum_intel_openvino``), and the openvino check imports it while it runs.
"""
