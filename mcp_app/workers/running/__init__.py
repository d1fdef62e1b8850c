"""The running side of worker calls: one call run to its stored outcome, the Celery tasks, the reaper."""
