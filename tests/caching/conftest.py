from tests.transport.conftest import make_access, orm  # noqa: F401  (the same fixtures, at the wire)
