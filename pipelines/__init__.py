"""Thin DVC stage entry points: parse params.yaml, call the library, write outputs."""
