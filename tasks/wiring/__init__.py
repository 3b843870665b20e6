"""How a call travels through Celery: the app and its configuration, the dispatcher and its
publisher thread, the broker's transport (and its kombu names, Sentinel URLs), the
record-backed results, the services' checks. Used by callers and workers alike; runs no task."""
