"""Task kinds and the readers of users' data files."""
