"""What ours is measured against, and the no-op tool every side runs: bare Celery (the fair
peer and the one-task peer), Celery's defaults, DBOS, and the ablation of our worker."""
