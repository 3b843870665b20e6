"""The benchmark's own runs in the suite (``python -m bench`` and its studies, small sizes):
every figure is there and of a sane type, so the benchmark cannot rot. Values are never
checked against targets here; the machines are too noisy (bench/README.md)."""
