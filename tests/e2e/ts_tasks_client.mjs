// The official TypeScript SDK (@modelcontextprotocol/sdk 1.x) using its experimental 2025-11-25 tasks client
// (client.experimental.tasks) against mcp-host.
//
// Run by tests/e2e/test_ts_sdk_client.py (test_typescript_sdk_runs_experimental_tasks). It connects, lists tools
// (the SDK learns each tool's execution.taskSupport), then:
//   - callToolStream on an optional tool with a task (ttl 60000): every message it yields (taskCreated,
//     taskStatus…, result), the SDK polling tasks/get and fetching tasks/result;
//   - callToolStream on a required tool that ends with a tool error: the messages (the task fails);
//   - a task-augmented tools/call of a long call, then cancelTask, getTask, and cancelTask again (refused);
//   - listTasks.
// Everything observed is printed as one JSON object on stdout; any failure exits non-zero (stderr).
//
// Environment: MCP_TS_SDK_DIR, MCP_URL, MCP_TOKEN, MCP_TIMEOUT_MS (as for ts_client.mjs).
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
const timeout = Number(process.env.MCP_TIMEOUT_MS || 10000);

const load = (relative) => import(pathToFileURL(join(sdkDir, 'dist', 'esm', relative)).href);
const { Client } = await load('client/index.js');
const { StreamableHTTPClientTransport } = await load('client/streamableHttp.js');
const { CreateTaskResultSchema } = await load('types.js');

const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${token}` } },
});
const transportErrors = [];
const client = new Client({ name: 'mcp-host-e2e-ts-tasks', version: '1.0.0' }, { defaultTaskPollInterval: 100 });
client.onerror = (error) => transportErrors.push(String(error?.message ?? error));
const options = { timeout };

const collect = async (stream) => {
  const seen = [];
  for await (const message of stream) {
    if (message.type === 'error') {
      seen.push({ type: 'error', code: message.error?.code ?? null, message: String(message.error?.message) });
    } else {
      seen.push(message);
    }
  }
  return seen;
};

const error = async (promise) => {
  try {
    await promise;
    return null;
  } catch (caught) {
    return { code: caught?.code ?? null, message: String(caught?.message ?? caught) };
  }
};

await client.connect(transport, options);
const observed = {
  protocolVersion: transport.protocolVersion ?? null,
  serverCapabilities: client.getServerCapabilities() ?? null,
};
observed.tools = (await client.listTools(undefined, options)).tools;
observed.isToolTask = {
  slow_compute: client.isToolTask('slow_compute'),
  failing_job: client.isToolTask('failing_job'),
  greet: client.isToolTask('greet'),
};

observed.completedStream = await collect(
  client.experimental.tasks.callToolStream(
    { name: 'slow_compute', arguments: { seconds: 1, label: 'ts' } },
    undefined,
    { ...options, task: { ttl: 60000 } },
  ),
);
observed.failedStream = await collect(
  client.experimental.tasks.callToolStream({ name: 'failing_job', arguments: {} }, undefined, options),
);

const long = await client.request(
  { method: 'tools/call', params: { name: 'slow_compute', arguments: { seconds: 60, label: 'long' } } },
  CreateTaskResultSchema,
  { ...options, task: { ttl: 60000 } },
);
observed.longTask = long.task;
observed.cancelled = await client.experimental.tasks.cancelTask(long.task.taskId, options);
observed.afterCancel = await client.experimental.tasks.getTask(long.task.taskId, options);
observed.cancelAgain = await error(client.experimental.tasks.cancelTask(long.task.taskId, options));
observed.unknown = await error(client.experimental.tasks.getTask('no-such-task', options));

observed.listed = await client.experimental.tasks.listTasks(undefined, options);

await transport.terminateSession();
await client.close();
observed.transportErrors = transportErrors;
process.stdout.write(`${JSON.stringify(observed)}\n`);
