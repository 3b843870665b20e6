"""The chaos run (``python -m bench.studies.chaos``) and the reproductions it grew from."""
