"""OAuth 2.1 for hosted MCP servers, on django-oauth-toolkit (DOT).

mcp-host is its own authorization server (one issuer: the site's origin) and every MCP server is a protected
resource (``<origin>/mcp/<server_id>``, RFC 9728 metadata at ``/.well-known/oauth-protected-resource/mcp/<id>``).
DOT does the protocol: RFC 8414 metadata, authorization code with PKCE S256 only, refresh rotation, revocation,
RFC 8707 resource indicators, RFC 9207 ``iss``, dynamic registration (RFC 7591) and client ID metadata
documents, tokens stored as digests. This package only adds what is mcp-host's own, through DOT's hooks:

- ``provider``: the ``OAUTH2_PROVIDER`` settings a project uses (``provider_settings()``);
- ``resources``: resource URL ↔ MCP server, and the metadata URL the 401 challenge names;
- ``validator``: the ``resource`` must name exactly one OAuth-enabled server; each access token is mirrored as
  an agent token of the consent's agent, so the request path (``mcp_app.transport.auth``) resolves it from the
  identity cache like any agent token (``mcp_app.models.oauth``);
- ``views`` and ``forms``: the per-server resource metadata, the sign-in and consent pages (who may consent,
  which grant), open dynamic registration with a rate limit and a per-tenant switch, consent withdrawal;
- ``cimd``: the client ID metadata document fetcher, through ``mcp_app.netguard``;
- ``signals``: revocations, client deletion and user deactivation reach the mirrors (and every process).
"""
