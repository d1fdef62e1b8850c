"""Worker calls: tool calls that run on Celery workers (``execution="worker"``), with the same context as inline.

- ``serving``: what a serving (daphne) process runs: the routing runner, admission, dispatch, the inbox, liveness;
- ``running``: what runs a call (a Celery worker, or the serving process without a broker): the call, its
  drivers, the relay of its events, the Celery tasks, the reaper. It never imports ``serving`` (a contract);
- here, what both share: the typed messages (``message``) and what of the record is the workers' (``records``).

Design and settings: docs/workers.md.
"""
