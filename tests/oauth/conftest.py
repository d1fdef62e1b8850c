from tests.oauth_flow import _registrations_not_counted, oauth, oauth_world  # noqa: F401  (fixtures)
