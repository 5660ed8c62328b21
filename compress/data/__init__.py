"""Prepared splits on disk (prepare, the data card, Prepared) and their encoding into model inputs."""
