"""Benchmarks of tool-boundary against bare Celery on the same Redis (``python -m bench``).

Not tests: every figure is a ratio against a baseline measured in the same run, because the
machines are shared and noisy. See ``bench/README.md``.
"""
