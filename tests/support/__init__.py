"""What the tests share: servers, settings, worker and telemetry helpers, one ``wait_until``."""
