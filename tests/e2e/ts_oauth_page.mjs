// The official TypeScript SDK (@modelcontextprotocol/sdk 1.x) as an OAuth client in a browser page, the way the
// MCP Inspector runs it: the page's origin is not mcp-host's, so the MCP endpoint's 401, the metadata, the
// registration and the token request are all cross-origin (CORS) fetches. The page knows only the server URL
// (?server=…). Its OAuthClientProvider keeps its state in sessionStorage across the trip to the authorization
// server; redirectToAuthorization navigates the page there, and mcp-host sends it back to /callback?code=….
// There the SDK exchanges the code, then the page opens a session, calls `echo` and sets window.mcpResult
// ({protocolVersion, text, clientId} or {error}). Served by tests/e2e/browser.py (sdk_page_server).
import { auth, UnauthorizedError } from '/sdk/client/auth.js';
import { StreamableHTTPClientTransport } from '/sdk/client/streamableHttp.js';

const params = new URLSearchParams(window.location.search);
const store = {
  get: (key) => JSON.parse(window.sessionStorage.getItem(key) ?? 'null') ?? undefined,
  set: (key, value) => window.sessionStorage.setItem(key, JSON.stringify(value)),
};
if (params.get('server')) store.set('server', params.get('server'));
const serverUrl = new URL(store.get('server'));
const redirect = `${window.location.origin}/callback`;

const provider = {
  get redirectUrl() { return redirect; },
  get clientMetadata() {
    return {
      client_name: 'TypeScript SDK in a browser page',
      redirect_uris: [redirect],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
    };
  },
  clientInformation: () => store.get('client'),
  saveClientInformation: (info) => store.set('client', info),
  tokens: () => store.get('tokens'),
  saveTokens: (tokens) => store.set('tokens', tokens),
  saveCodeVerifier: (verifier) => store.set('verifier', verifier),
  codeVerifier: () => store.get('verifier'),
  redirectToAuthorization: (url) => { window.location.assign(url.toString()); },
};

const request = (transport, message) => new Promise((resolve, reject) => {
  transport.onmessage = (answer) => { if (answer.id === message.id) resolve(answer); };
  transport.onerror = reject;
  transport.send(message).catch(reject);
});

const session = async () => {
  const transport = new StreamableHTTPClientTransport(serverUrl, { authProvider: provider });
  await transport.start();
  const init = await request(transport, {
    jsonrpc: '2.0', id: 1, method: 'initialize',
    params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 'browser-page', version: '1' } },
  });
  transport.setProtocolVersion(init.result.protocolVersion);
  await transport.send({ jsonrpc: '2.0', method: 'notifications/initialized' });
  const called = await request(transport, {
    jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name: 'echo', arguments: { text: 'hello browser' } },
  });
  return { protocolVersion: init.result.protocolVersion, text: called.result.content[0].text };
};

try {
  if (window.location.pathname === '/callback') {
    const outcome = await auth(provider, { serverUrl, authorizationCode: params.get('code') });
    window.mcpResult = { ...(await session()), outcome, clientId: store.get('client')?.client_id ?? null };
  } else {
    window.mcpResult = await session(); // no token yet: the 401 starts OAuth and the page navigates away
  }
} catch (error) {
  if (!(error instanceof UnauthorizedError)) window.mcpResult = { error: String(error?.stack ?? error) };
}
