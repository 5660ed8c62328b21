"""Thin DVC stage entry points: parse params.yaml, call the library, write outputs."""
import os

# Stage logs show our own progress bars and messages; transformers' per-load reports
# ("newly initialized: classifier.weight") are expected here and only add noise.
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
