"""Worker calls: tool calls that run outside the serving process (Celery), and their admission (``quotas``)."""
