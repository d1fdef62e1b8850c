from tests.webhook_server import webhook_server  # noqa: F401  (fixture)
