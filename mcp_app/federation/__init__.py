"""Federation: a tenant's upstream MCP servers behind mcp-host's tokens, grants, audit and quotas.

- ``connection``: an SDK client (the official ``mcp`` package, auto era) to one upstream, SSRF-guarded;
- ``pool``: the connections of this process, one per upstream and event loop, shared by concurrent calls;
- ``relay``: what an upstream asks during a call (progress, logs, elicitation, sampling), carried to the client;
- ``calls``: tools/call, resources/read and prompts/get proxied, failures bounded (timeouts, the breaker);
- ``breaker``: a circuit breaker per upstream, shared by every process through Redis;
- ``sync``: the upstream's catalog imported as entries under its prefix.

Nothing here forwards a client's token upstream: upstreams see only the credentials their tenant configured.
"""
