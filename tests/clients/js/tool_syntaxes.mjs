// Several requests in one Node.js process, one case per model: openai-node's chat.completions.stream()
// helper, its client.responses.create() streamed, and the Vercel AI SDK's streamText() (through
// @ai-sdk/openai-compatible), each with the chat tools given and tool_choice left to the model.
// Input: one JSON argument {baseURL, prompt, tools: [chat tools], models: [model]}. Output: one JSON line
// on stdout, {cases: [{model, chat, responses, aiSdk}]}: per client what it built (chat: the helper's
// final completion, the calls it reported done and the content deltas' text; responses: the event types,
// the last event's Response and the output_text deltas' text; aiSdk: the part types, error parts, tool
// calls, finish reason and text). A client that raises gives {error, name} in its place; the others run on.
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { jsonSchema, streamText, tool } from "ai";
import OpenAI from "openai";

const spec = JSON.parse(process.argv[2]);
const client = new OpenAI({ baseURL: spec.baseURL, apiKey: "not-checked", maxRetries: 0 });
const provider = createOpenAICompatible({ name: "conformant", baseURL: spec.baseURL, apiKey: "not-checked" });

function failure(error) {
  return { error: String(error?.message ?? error), name: error?.constructor?.name, status: error?.status };
}

async function chat(model) {
  const stream = client.chat.completions.stream({
    model,
    messages: [{ role: "user", content: spec.prompt }],
    tools: spec.tools,
  });
  const argumentsDone = [];
  let text = "";
  stream.on("tool_calls.function.arguments.done", (event) => {
    argumentsDone.push({ index: event.index, name: event.name, arguments: event.arguments });
  });
  stream.on("content.delta", (event) => {
    text += event.delta;
  });
  const final = await stream.finalChatCompletion();
  return { argumentsDone, text, final };
}

async function responses(model) {
  const stream = await client.responses.create({
    model,
    input: spec.prompt,
    tools: spec.tools.map((chatTool) => ({ type: "function", ...chatTool.function })),
    stream: true,
  });
  const types = [];
  let response = null;
  let text = "";
  for await (const event of stream) {
    types.push(event.type);
    if (event.type === "response.output_text.delta") {
      text += event.delta;
    }
    if (event.response) {
      response = event.response;
    }
  }
  return { types, response, text };
}

async function aiSdk(model) {
  const tools = Object.fromEntries(
    spec.tools.map(({ function: f }) => [
      f.name,
      // No execute: the SDK stops at the calls and hands them over, as an agent loop's first step does.
      tool({ description: f.description, inputSchema: jsonSchema(f.parameters) }),
    ]),
  );
  const result = streamText({ model: provider.chatModel(model), prompt: spec.prompt, tools, maxRetries: 0 });
  const parts = [];
  const errors = [];
  let text = "";
  for await (const part of result.fullStream) {
    parts.push(part.type);
    if (part.type === "error" || part.type === "tool-error") {
      errors.push(String(part.error?.message ?? part.error));
    }
    if (part.type === "text-delta") {
      text += part.text;
    }
  }
  const toolCalls = (await result.toolCalls).map((call) => ({
    toolCallId: call.toolCallId,
    toolName: call.toolName,
    input: call.input,
    invalid: call.invalid ?? false,
  }));
  return { parts, errors, toolCalls, finishReason: await result.finishReason, text };
}

async function settle(run) {
  try {
    return await run();
  } catch (error) {
    return failure(error);
  }
}

const cases = [];
for (const model of spec.models) {
  cases.push({
    model,
    chat: await settle(() => chat(model)),
    responses: await settle(() => responses(model)),
    aiSdk: await settle(() => aiSdk(model)),
  });
}
console.log(JSON.stringify({ cases }));
