// The official TypeScript SDK (@modelcontextprotocol/sdk 1.x) as an OAuth client of mcp-host: it knows only the
// server URL. Its OAuthClientProvider (below, in memory) registers dynamically; when the SDK wants the person at
// the authorization endpoint, this script prints {"authorize": url} on stdout and waits for the redirect URL on
// stdin (tests/e2e/test_oauth_clients.py signs in and consents in headless chromium), then finishes the flow,
// reconnects, lists and calls tools, and prints {"result": …}. Failures exit non-zero with the error on stderr.
//
// Environment: MCP_TS_SDK_DIR (the installed package folder), MCP_URL, MCP_REDIRECT (the redirect URI).
import { createInterface } from 'node:readline';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const required = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};
const sdkDir = required('MCP_TS_SDK_DIR');
const url = new URL(required('MCP_URL'));
const redirect = required('MCP_REDIRECT');
const load = (relative) => import(pathToFileURL(join(sdkDir, 'dist', 'esm', relative)).href);
const { Client } = await load('client/index.js');
const { StreamableHTTPClientTransport } = await load('client/streamableHttp.js');
const { UnauthorizedError } = await load('client/auth.js');

const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const state = { tokens: undefined, client: undefined, verifier: undefined, authorizations: 0 };
const provider = {
  get redirectUrl() { return redirect; },
  get clientMetadata() {
    return {
      client_name: 'TypeScript SDK e2e',
      redirect_uris: [redirect],
      grant_types: ['authorization_code', 'refresh_token'],
      response_types: ['code'],
      token_endpoint_auth_method: 'none',
    };
  },
  clientInformation: () => state.client,
  saveClientInformation: (info) => { state.client = info; },
  tokens: () => state.tokens,
  saveTokens: (tokens) => { state.tokens = tokens; },
  saveCodeVerifier: (verifier) => { state.verifier = verifier; },
  codeVerifier: () => state.verifier,
  redirectToAuthorization: (authorizationUrl) => {
    state.authorizations += 1;
    process.stdout.write(JSON.stringify({ authorize: authorizationUrl.toString() }) + '\n');
  },
};

const connect = async () => {
  const transport = new StreamableHTTPClientTransport(url, { authProvider: provider });
  const client = new Client({ name: 'ts-oauth-e2e', version: '1.0.0' });
  await client.connect(transport);
  return { client, transport };
};

let connected;
try {
  connected = await connect();
} catch (error) {
  if (!(error instanceof UnauthorizedError)) throw error;
  const { value: callback } = await lines.next();
  const code = new URL(callback.trim()).searchParams.get('code');
  const pending = new StreamableHTTPClientTransport(url, { authProvider: provider });
  await pending.finishAuth(code);
  connected = await connect();
}
const tools = await connected.client.listTools();
const called = await connected.client.callTool({ name: 'echo', arguments: { text: 'hello typescript' } });
const result = {
  protocolVersion: connected.transport.protocolVersion ?? null,
  tools: tools.tools.map((tool) => tool.name),
  text: called.content[0].text,
  authorizations: state.authorizations,
  clientId: state.client?.client_id ?? null,
};
await connected.client.close();
process.stdout.write(JSON.stringify({ result }) + '\n');
process.exit(0);
