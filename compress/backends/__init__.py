"""One module per backend (build, run, check parity) and the shared base: the Artifact, the backend registry and the runner lookup."""
