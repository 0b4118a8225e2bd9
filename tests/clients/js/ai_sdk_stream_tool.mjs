// The Vercel AI SDK's streamText() with one tool, through @ai-sdk/openai-compatible.
// Input: one JSON argument {baseURL, model, prompt, tool: {name, description, parameters}, toolChoice,
// parallelToolCalls, maxTokens}. Output: one JSON line on stdout: the stream's part types, the tool calls and finish reason
// the SDK settled on, and any error part. A thrown client error is a JSON line {error, name, parts, errors}
// (the error parts seen before it) and exit 1.
import { createOpenAICompatible } from "@ai-sdk/openai-compatible";
import { jsonSchema, streamText, tool } from "ai";

const spec = JSON.parse(process.argv[2]);
const provider = createOpenAICompatible({ name: "conformant", baseURL: spec.baseURL, apiKey: "not-checked" });
const toolChoice =
  spec.toolChoice === "required" ? "required" : { type: "tool", toolName: spec.tool.name };

const parts = [];
const errors = [];
try {
  const result = streamText({
    model: provider.chatModel(spec.model),
    prompt: spec.prompt,
    // No execute: the SDK stops at the call and hands it over, as an agent loop's first step does.
    tools: {
      [spec.tool.name]: tool({
        description: spec.tool.description,
        inputSchema: jsonSchema(spec.tool.parameters),
      }),
    },
    toolChoice,
    maxOutputTokens: spec.maxTokens,
    // The provider has no option of its own for it; keys it does not know go into the request body as given.
    providerOptions: { conformant: { parallel_tool_calls: spec.parallelToolCalls } },
    maxRetries: 0,
  });
  for await (const part of result.fullStream) {
    parts.push(part.type);
    if (part.type === "error" || part.type === "tool-error") {
      errors.push(String(part.error?.message ?? part.error));
    }
  }
  const toolCalls = (await result.toolCalls).map((call) => ({
    toolCallId: call.toolCallId,
    toolName: call.toolName,
    input: call.input,
    invalid: call.invalid ?? false,
  }));
  console.log(JSON.stringify({ parts, errors, toolCalls, finishReason: await result.finishReason }));
} catch (error) {
  console.log(
    JSON.stringify({ error: String(error?.message ?? error), name: error?.constructor?.name, parts, errors }),
  );
  process.exit(1);
}
