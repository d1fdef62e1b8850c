"""Runtime tests: the webhook server fixture (a real HTTP server on 127.0.0.1)."""

from tests.webhook_server import webhook_server  # noqa: F401  (fixture)
