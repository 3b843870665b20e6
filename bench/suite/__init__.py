"""The suite: ``python -m bench`` (B1-B7 against the peers, in one run) and what it measures
with (sides, sizes, CPU, command counts, fixtures, the lock, the run's metadata)."""
