"""The chaos run (``python -m bench.chaos``) and the reproductions it grew from."""
