"""Agent tokens and personal API keys are one kind of thing, ``mcp_app.models.credentials.Credential``: the same
raw shape under their own scheme, digest-only storage, the same rule for which are usable, and the same lookup
(one query, by digest). Each case runs for both models through their public verbs."""

from __future__ import annotations

import hashlib
import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone

from mcp_app.models import AgentToken, ApiKey
from mcp_app.models.credentials import Credential

SHAPES = {
    "token": re.compile(r"^mcp_[0-9a-f]{8}_[A-Za-z0-9_-]{43}$"),
    "key": re.compile(r"^mcpk_[0-9a-f]{8}_[A-Za-z0-9_-]{43}$"),
}


@pytest.fixture(params=["token", "key"])
def issue(request: Any, agent_factory: Any, db: Any) -> Any:
    """``issue(**fields) -> (credential, raw)`` for an agent token or an API key; ``issue.kind`` says which."""
    if request.param == "token":
        agent = agent_factory()

        def make(**fields: Any) -> tuple[Any, str]:
            return AgentToken.objects.issue_token(agent, **fields)

    else:
        user = get_user_model().objects.create_user(username=f"u{ApiKey.objects.count()}", password="x")

        def make(**fields: Any) -> tuple[Any, str]:
            return ApiKey.objects.issue_key(user, **fields)

    make.kind = request.param
    make.model = AgentToken if request.param == "token" else ApiKey
    return make


def test_both_models_are_credentials_without_a_table_of_their_own():
    assert issubclass(AgentToken, Credential) and issubclass(ApiKey, Credential)
    assert Credential._meta.abstract
    for model in (AgentToken, ApiKey):
        digest = model._meta.get_field("digest")
        assert digest.unique and not digest.editable and digest.max_length == 64


def test_raw_value_has_its_scheme_and_only_the_digest_is_stored(issue):
    credential, raw = issue(name="ci")
    assert SHAPES[issue.kind].match(raw), raw
    assert raw.split("_")[1] == credential.prefix
    row = issue.model.objects.filter(pk=credential.pk).values().get()
    assert row["digest"] == hashlib.sha256(raw.encode()).hexdigest()
    secret = raw.split("_", 2)[2]  # the scheme and the hex prefix hold no "_"; the secret may
    assert all(secret not in str(value) for value in row.values())


def test_usable_means_neither_revoked_nor_expired(issue):
    now = timezone.now()
    forever, _ = issue(name="forever")
    later, _ = issue(name="later", expires_at=now + timedelta(hours=1))
    expired, _ = issue(name="expired", expires_at=now - timedelta(seconds=1))
    revoked, _ = issue(name="revoked")
    revoked.revoke()
    usable = set(issue.model.objects.usable().values_list("name", flat=True))
    assert usable == {"forever", "later"}
    # At a given moment: an hour and a minute from now, "later" has expired too.
    assert set(issue.model.objects.usable(now + timedelta(minutes=61)).values_list("name", flat=True)) == {"forever"}
    for credential in (forever, later, expired, revoked):
        credential.refresh_from_db()
    assert [c.is_usable for c in (forever, later, expired, revoked)] == [True, True, False, False]


def authenticate(issue: Any, raw: str) -> Any:
    return (AgentToken if issue.kind == "token" else ApiKey).objects.authenticate(raw)


def test_authenticate_is_one_query_by_digest(issue, django_assert_num_queries):
    credential, raw = issue()
    with django_assert_num_queries(1):
        assert authenticate(issue, raw) == credential


def test_authenticate_refuses_without_a_query_what_cannot_be_one(issue, django_assert_num_queries):
    _, raw = issue()
    other_scheme = ("mcpk_" if issue.kind == "token" else "mcp_") + raw.split("_", 1)[1]
    with django_assert_num_queries(0):
        assert authenticate(issue, other_scheme) is None
        assert authenticate(issue, raw + "x" * 256) is None


def test_authenticate_refuses_unknown_revoked_and_expired(issue):
    _, raw = issue()
    assert authenticate(issue, raw[:-2] + ("AA" if not raw.endswith("AA") else "BB")) is None
    revoked, revoked_raw = issue()
    revoked.revoke()
    assert authenticate(issue, revoked_raw) is None
    _, expired_raw = issue(expires_at=timezone.now() - timedelta(seconds=1))
    assert authenticate(issue, expired_raw) is None
