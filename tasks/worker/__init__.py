"""What runs only inside a worker: the task bodies, every worker hook (``signals``), the pool,
the start-up checks, progress events, the metrics endpoint and trace ids in log lines."""
