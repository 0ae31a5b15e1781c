// The official TypeScript MCP client calling one tool as a task through the gateway
// (client.experimental.tasks.callToolStream: the task created, its statuses as it polls
// tasks/get, then tasks/result). Prints one JSON line per event, for
// tests/gateway/test_gateway_tasks.py. Usage: node tasks_client.mjs URL KEY TOOL ARGUMENTS_JSON
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, key, tool, argumentsJson] = process.argv.slice(2);
const say = (event) => console.log(JSON.stringify(event));

const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: { Authorization: `Bearer ${key}` } },
});
const client = new Client({ name: "gavel-tasks-test", version: "1.0.0" });
await client.connect(transport);
say({
  type: "connected",
  protocolVersion: transport.protocolVersion ?? null,
  tasks: client.getServerCapabilities()?.tasks ?? null,
});
const { tools } = await client.listTools();
say({ type: "tools", taskSupport: Object.fromEntries(tools.map((t) => [t.name, t.execution?.taskSupport ?? null])) });
const stream = client.experimental.tasks.callToolStream(
  { name: tool, arguments: JSON.parse(argumentsJson) },
  undefined,
  { task: { ttl: 600000 } },
);
for await (const message of stream) {
  if (message.type === "error") {
    say({ type: "error", code: message.error?.code ?? null, message: String(message.error?.message ?? message.error) });
  } else {
    say(message);
  }
}
await client.close();
