// openai-node's chat.completions.stream() helper with one tool and a forced tool_choice.
// Input: one JSON argument {baseURL, model, prompt, tool: {name, description, parameters}, toolChoice,
// parallelToolCalls, maxTokens}. Output: one JSON line on stdout with what the helper built: its final completion and the
// arguments it reported done for each call. A client error is a JSON line {error, name} and exit status 1.
import OpenAI from "openai";

const spec = JSON.parse(process.argv[2]);
const client = new OpenAI({ baseURL: spec.baseURL, apiKey: "not-checked", maxRetries: 0 });

try {
  const stream = client.chat.completions.stream({
    model: spec.model,
    messages: [{ role: "user", content: spec.prompt }],
    tools: [{ type: "function", function: spec.tool }],
    tool_choice: spec.toolChoice,
    parallel_tool_calls: spec.parallelToolCalls,
    max_tokens: spec.maxTokens,
  });
  const argumentsDone = [];
  let chunks = 0;
  stream.on("chunk", () => {
    chunks += 1;
  });
  // The helper's own event for a call whose arguments the stream finished: what agents act on.
  stream.on("tool_calls.function.arguments.done", (event) => {
    argumentsDone.push({ index: event.index, name: event.name, arguments: event.arguments });
  });
  const final = await stream.finalChatCompletion();
  console.log(JSON.stringify({ chunks, argumentsDone, final }));
} catch (error) {
  console.log(JSON.stringify({ error: String(error?.message ?? error), name: error?.constructor?.name }));
  process.exit(1);
}
