"""Shared plumbing with no ML in it: config sections, user errors, atomic I/O, the environment record, process groups, DVC experiments."""
