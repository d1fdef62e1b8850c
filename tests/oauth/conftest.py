from tests.oauth_flow import oauth, oauth_world  # noqa: F401  (fixtures)
