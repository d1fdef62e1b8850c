// Loaded with `node --import` before the MCP conformance CLI, which has no option for extra HTTP headers.
// mcp-host needs a bearer token on every request and `?agentId=` in the URL, so this adds them to the three
// HTTP clients the CLI uses:
//   - global fetch (the stateless wire, most probes, and the SDK transport of the handshake era);
//   - undici.request (the DNS-rebinding probe), through undici's global dispatcher;
//   - node:http.request (the header-validation probes), which is given only the URL's path, so the query
//     is put back there.
// Headers the CLI sets itself are never overridden.
//
// Environment:
//   MCP_CONFORMANCE_HEADERS  JSON object of headers, e.g. {"Authorization": "Bearer mcp_..."}
//   MCP_CONFORMANCE_QUERY    query string for node:http paths that have none, e.g. agentId=demo-agent
//   MCP_CONFORMANCE_UNDICI   a file inside the CLI's package, to load the CLI's own copy of undici from
import http from 'node:http';
import { createRequire } from 'node:module';

const added = JSON.parse(process.env.MCP_CONFORMANCE_HEADERS || '{}');
const query = process.env.MCP_CONFORMANCE_QUERY || '';

const hasHeader = (headers, name) =>
  Object.keys(headers).some((key) => key.toLowerCase() === name.toLowerCase());

function withAdded(headers) {
  const result = { ...headers };
  for (const [name, value] of Object.entries(added)) {
    if (!hasHeader(result, name)) result[name] = value;
  }
  return result;
}

// Global fetch.
const originalFetch = globalThis.fetch;
globalThis.fetch = (input, init = {}) => {
  const headers = new Headers(init.headers ?? (input instanceof Request ? input.headers : undefined));
  for (const [name, value] of Object.entries(added)) {
    if (!headers.has(name)) headers.set(name, value);
  }
  return originalFetch(input, { ...init, headers });
};

// node:http.request with an options object.
const originalRequest = http.request;
http.request = function request(options, ...rest) {
  if (options && typeof options === 'object' && !(options instanceof URL)) {
    options = { ...options, headers: withAdded(options.headers ?? {}) };
    if (query && typeof options.path === 'string' && !options.path.includes('?')) {
      options.path = `${options.path}?${query}`;
    }
  }
  return originalRequest.call(this, options, ...rest);
};

// undici.request: wrap the global dispatcher (undici keeps its headers as an object or a flat array).
function headersObject(headers) {
  if (!Array.isArray(headers)) return { ...(headers ?? {}) };
  const result = {};
  for (let index = 0; index + 1 < headers.length; index += 2) result[headers[index]] = headers[index + 1];
  return result;
}

const requireFromCli = createRequire(process.env.MCP_CONFORMANCE_UNDICI || import.meta.url);
const undici = requireFromCli('undici');
const dispatcher = undici.getGlobalDispatcher();
undici.setGlobalDispatcher(
  dispatcher.compose((dispatch) => (options, handler) =>
    dispatch({ ...options, headers: withAdded(headersObject(options.headers)) }, handler),
  ),
);
