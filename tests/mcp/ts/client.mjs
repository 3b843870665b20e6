// The TypeScript MCP SDK as a client of `tool-boundary mcp` (stdio or streamable HTTP).
// Usage: node client.mjs <scenario> <json options>; prints one JSON line with what it saw.
// Over stdio the server command comes from TB_MCP_COMMAND (a JSON array), its environment is
// ours; with options.url, over streamable HTTP.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { CallToolResultSchema } from "@modelcontextprotocol/sdk/types.js";

const [scenario, rawOptions] = process.argv.slice(2);
const options = JSON.parse(rawOptions || "{}");

const meta = (callId) => {
  const fields = { "tool-boundary/run_id": options.run };
  if (callId) fields["tool-boundary/tool_call_id"] = callId;
  return fields;
};

// An OAuth client with no token yet: what the SDK discovers from the server's 401 challenge
// (the protected resource metadata, the authorization server) is kept, and the authorization
// it would send the user to is recorded instead of opened.
const discovered = {};
const authProvider = {
  get redirectUrl() { return "http://127.0.0.1/callback"; },
  get clientMetadata() { return { client_name: "ts-sdk-test", redirect_uris: ["http://127.0.0.1/callback"] }; },
  clientInformation: () => ({ client_id: "ts-sdk-test" }),
  tokens: () => undefined,
  saveTokens: () => {},
  saveCodeVerifier: () => {},
  codeVerifier: () => "unused",
  saveDiscoveryState: (state) => { discovered.state = state; },
  redirectToAuthorization: (url) => { discovered.authorizationUrl = url.href; },
};

// options.url: streamable HTTP to a running server (options.token: its bearer token); else
// stdio, starting TB_MCP_COMMAND.
let transport;
if (options.url) {
  const requestInit = options.token ? { headers: { Authorization: `Bearer ${options.token}` } } : undefined;
  const auth = scenario === "challenge" ? { authProvider } : {};
  transport = new StreamableHTTPClientTransport(new URL(options.url), { requestInit, ...auth });
} else {
  const [command, ...args] = JSON.parse(process.env.TB_MCP_COMMAND);
  transport = new StdioClientTransport({ command, args, env: process.env, stderr: "ignore" });
}
const client = new Client({ name: "ts-sdk-test", version: "0" });
if (scenario === "challenge") {
  // Without a token: the connection is refused, after the SDK followed the challenge.
  try {
    await client.connect(transport);
    discovered.connected = true;
  } catch (error) {
    discovered.error = error.constructor.name;
  }
  process.stdout.write(JSON.stringify(discovered) + "\n");
  process.exit(0);
}
await client.connect(transport);
const out = { protocolVersion: transport._protocolVersion ?? null };
out.capabilities = client.getServerCapabilities();

try {
  if (scenario === "plain") {
    // A plain call with a short client timeout, kept alive by progress.
    let progress = 0;
    const started = Date.now();
    try {
      const result = await client.callTool(
        { name: options.tool, arguments: options.arguments, _meta: meta(options.callId) },
        CallToolResultSchema,
        {
          timeout: options.timeoutMs,
          resetTimeoutOnProgress: true,
          onprogress: () => { progress += 1; },
        },
      );
      out.isError = result.isError ?? false;
      out.structured = result.structuredContent;
    } catch (error) {
      out.error = { code: error.code ?? null, message: String(error.message) };
    }
    out.ms = Date.now() - started;
    out.progress = progress;
  } else if (scenario === "task") {
    // A task-augmented call: the SDK's stream of task messages, then the task's state.
    const tools = await client.listTools();
    out.taskSupport = Object.fromEntries(tools.tools.map((t) => [t.name, t.execution?.taskSupport ?? null]));
    const started = Date.now();
    const stream = client.experimental.tasks.callToolStream(
      { name: options.tool, arguments: options.arguments, _meta: meta(options.callId) },
      CallToolResultSchema,
      { task: { ttl: options.ttl } },
    );
    out.messages = [];
    for await (const message of stream) {
      out.messages.push(message.type);
      if (message.type === "taskCreated") {
        out.taskId = message.task.taskId;
        out.created = message.task;
        out.createdMs = Date.now() - started;
      } else if (message.type === "result") {
        out.result = message.result;
      } else if (message.type === "error") {
        out.error = { code: message.error.code ?? null, message: String(message.error.message) };
      }
    }
    out.resultMs = Date.now() - started;
    if (out.taskId) {
      out.task = await client.experimental.tasks.getTask(out.taskId);
      if (out.capabilities?.tasks?.list) {
        out.listed = (await client.experimental.tasks.listTasks()).tasks.map((t) => t.taskId);
      }
    }
  } else if (scenario === "call") {
    // One plain call (over HTTP with a bearer token: the tools it may call, listed first).
    out.tools = (await client.listTools()).tools.map((t) => t.name);
    const result = await client.callTool(
      { name: options.tool, arguments: options.arguments, _meta: meta(options.callId) },
      CallToolResultSchema,
    );
    out.isError = result.isError ?? false;
    out.structured = result.structuredContent;
  } else if (scenario === "abort") {
    // A plain call the client gives up on: the SDK sends notifications/cancelled.
    const controller = new AbortController();
    const call = client.callTool(
      { name: options.tool, arguments: options.arguments, _meta: meta(options.callId) },
      CallToolResultSchema,
      { signal: controller.signal, timeout: 600000 },
    );
    setTimeout(() => controller.abort("user"), options.abortAfterMs);
    try {
      await call;
      out.aborted = false;
    } catch (error) {
      out.aborted = true;
    }
    out.abortedAt = Date.now();
  }
} finally {
  await client.close();
}
process.stdout.write(JSON.stringify(out) + "\n");
