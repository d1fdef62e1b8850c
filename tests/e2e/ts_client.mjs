// The official TypeScript SDK (@modelcontextprotocol/sdk 1.x) as a handshake-era client of mcp-host.
//
// Run by tests/e2e/test_ts_sdk_client.py, which installs the pinned SDK into a cache folder outside the work
// tree; the SDK's ESM entry points are loaded from there by path (ESM imports ignore NODE_PATH). It connects
// (initialize), then lists and calls tools (with progress), lists and reads resources (static and template),
// lists and gets a prompt, completes a prompt argument and terminates the session (DELETE). Everything it
// observes (results, progress callbacks, the negotiated version and session id, and each HTTP exchange through
// a recording fetch) is printed as one JSON object on stdout; the Python test asserts on it. Any failure exits
// non-zero with the error on stderr.
//
// Environment:
//   MCP_TS_SDK_DIR    the installed package folder (…/node_modules/@modelcontextprotocol/sdk)
//   MCP_URL           the endpoint, with ?agentId=
//   MCP_TOKEN         the agent's bearer token
//   MCP_FIXTURE       JSON: {templateUri, promptArguments, completeValue, progressSteps, echoText}
//   MCP_TIMEOUT_MS    per-request timeout (default 10000)
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const required = (name) => {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set`);
  return value;
};

const sdkDir = required('MCP_TS_SDK_DIR');
const url = required('MCP_URL');
const token = required('MCP_TOKEN');
const fixture = JSON.parse(required('MCP_FIXTURE'));
const timeout = Number(process.env.MCP_TIMEOUT_MS || 10000);

const load = (relative) => import(pathToFileURL(join(sdkDir, 'dist', 'esm', relative)).href);
const { Client } = await load('client/index.js');
const { StreamableHTTPClientTransport } = await load('client/streamableHttp.js');
const { LATEST_PROTOCOL_VERSION } = await load('types.js');

// Every HTTP exchange the transport makes, as seen at the wire: method, JSON-RPC method(s), the session id sent,
// status, and the session id and content type answered.
const exchanges = [];
const recordingFetch = async (input, init = {}) => {
  const headers = new Headers(init.headers);
  let rpc = null;
  if (typeof init.body === 'string') {
    const body = JSON.parse(init.body);
    rpc = Array.isArray(body) ? body.map((message) => message.method ?? null) : (body.method ?? null);
  }
  const response = await fetch(input, init);
  exchanges.push({
    httpMethod: init.method ?? 'GET',
    rpc,
    sentSessionId: headers.get('mcp-session-id'),
    sentProtocolVersion: headers.get('mcp-protocol-version'),
    status: response.status,
    receivedSessionId: response.headers.get('mcp-session-id'),
    contentType: response.headers.get('content-type'),
  });
  return response;
};

const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
  fetch: recordingFetch,
});
const transportErrors = [];
const client = new Client({ name: 'mcp-host-e2e-ts', version: '1.0.0' });
client.onerror = (error) => transportErrors.push(String(error?.message ?? error));

const options = { timeout };
const observed = { sdkLatestProtocolVersion: LATEST_PROTOCOL_VERSION };

await client.connect(transport, options);
observed.protocolVersion = transport.protocolVersion ?? null;
observed.sessionId = transport.sessionId ?? null;
observed.serverInfo = client.getServerVersion() ?? null;
observed.serverCapabilities = client.getServerCapabilities() ?? null;

observed.tools = (await client.listTools(undefined, options)).tools;
observed.echo = await client.callTool(
  { name: 'echo', arguments: { text: fixture.echoText } },
  undefined,
  options,
);

const progress = [];
observed.progressResult = await client.callTool(
  { name: 'progress_demo', arguments: { steps: fixture.progressSteps } },
  undefined,
  { ...options, onprogress: (update) => progress.push(update) },
);
observed.progress = progress;

observed.resources = (await client.listResources(undefined, options)).resources;
observed.resourceTemplates = (await client.listResourceTemplates(undefined, options)).resourceTemplates;
observed.staticRead = await client.readResource({ uri: observed.resources[0]?.uri }, options);
observed.templateRead = await client.readResource({ uri: fixture.templateUri }, options);

observed.prompts = (await client.listPrompts(undefined, options)).prompts;
observed.prompt = await client.getPrompt(
  { name: observed.prompts[0]?.name, arguments: fixture.promptArguments },
  options,
);
observed.completion = (
  await client.complete(
    {
      ref: { type: 'ref/prompt', name: observed.prompts[0]?.name },
      argument: { name: 'style', value: fixture.completeValue },
    },
    options,
  )
).completion;

await transport.terminateSession();
observed.sessionIdAfterTerminate = transport.sessionId ?? null;
await client.close();
observed.transportErrors = transportErrors;
observed.exchanges = exchanges;

process.stdout.write(`${JSON.stringify(observed)}\n`);
