"""A schemathesis fuzz run against the API's own running schema: no request, valid or not, gets a 5xx.

The schema is fetched from ``/api/schema/`` and the requests are sent to the real Django WSGI application in
this process (``schemathesis.openapi.from_wsgi``; the same middleware, URL routing, authentication and views
as a deployment, without a socket). The caller is a tenant admin with a personal API key, so requests reach
the views (not just the 401 in front of them), in a tenant that has one of every object and next to another
tenant. Every operation gets a bounded number of positive and negative examples, derandomized, so the run is
deterministic and takes well under a minute or two. Any 5xx fails with the case that produced it.
"""

from __future__ import annotations

from collections import Counter

import pytest
from django.core import signals
from django.db import close_old_connections
from hypothesis import HealthCheck, given, settings

EXAMPLES_PER_OPERATION = 6


@pytest.fixture
def wsgi_app():
    """Django's WSGI application, keeping this test's database connection (and transaction) across requests,
    as Django's own test client does."""
    from django.core.wsgi import get_wsgi_application

    signals.request_started.disconnect(close_old_connections)
    signals.request_finished.disconnect(close_old_connections)
    try:
        yield get_wsgi_application()
    finally:
        signals.request_started.connect(close_old_connections)
        signals.request_finished.connect(close_old_connections)


@pytest.fixture
def unthrottled(settings):
    """Hundreds of requests with one key in well under a minute: throttled answers would only hide the views."""
    settings.MCP_APP = {**settings.MCP_APP, "API_RATE_PER_KEY": None, "API_RATE_PER_USER": None}


def test_no_request_gets_a_server_error(two_tenants, wsgi_app, key_client, unthrottled):
    import schemathesis
    from schemathesis import GenerationMode

    from mcp_app.models import ApiKey

    acme, _ = two_tenants
    _, raw = ApiKey.objects.issue_key(acme.users["admin"], name="fuzz")
    headers = {"Authorization": f"Bearer {raw}"}
    schema = schemathesis.openapi.from_wsgi("/api/schema/?format=json", wsgi_app)
    operations = [result.ok() for result in schema.get_all_operations()]
    assert len(operations) >= 60
    server_errors: list[str] = []
    statuses: Counter[int] = Counter()

    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):
            strategy = operation.as_strategy(generation_mode=mode)

            @settings(
                max_examples=EXAMPLES_PER_OPERATION,
                derandomize=True,
                database=None,
                deadline=None,
                suppress_health_check=list(HealthCheck),
            )
            @given(case=strategy)
            def run(case):
                response = case.call(headers=headers)
                statuses[response.status_code] += 1
                if response.status_code >= 500:
                    server_errors.append(
                        f"{response.status_code} {case.method} {case.formatted_path} "
                        f"query={case.query!r} body={case.body!r}: {response.text[:300]}"
                    )

            run()

    assert server_errors == []
    # The run reached the views: reads and writes succeeded, and invalid input was refused as such.
    assert statuses[200] and statuses[201] and statuses[400] and statuses[404], statuses
    assert sum(statuses.values()) >= 2 * len(operations)
