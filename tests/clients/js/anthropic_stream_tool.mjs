// @anthropic-ai/sdk's messages.stream() helper with one tool and a forced tool_choice, then
// messages.create() with the tool's result, and messages.countTokens().
// Input: one JSON argument {baseURL, model, prompt, tool: {name, description, input_schema}, toolChoice,
// maxTokens, result}. Output: one JSON line on stdout: the helper's final message, the input it reported
// for the call (its own "inputJson" snapshots' last), the answer to the tool's result and the count. A
// client error is a JSON line {error, name, status} and exit status 1.
import Anthropic from "@anthropic-ai/sdk";

const spec = JSON.parse(process.argv[2]);
const client = new Anthropic({ baseURL: spec.baseURL, apiKey: "not-checked", maxRetries: 0 });

try {
  const asked = [{ role: "user", content: spec.prompt }];
  const stream = client.messages.stream({
    model: spec.model,
    max_tokens: spec.maxTokens,
    messages: asked,
    tools: [spec.tool],
    tool_choice: spec.toolChoice,
  });
  let events = 0;
  let inputSnapshot = null;
  stream.on("streamEvent", () => {
    events += 1;
  });
  stream.on("inputJson", (_partial, snapshot) => {
    inputSnapshot = snapshot;
  });
  const final = await stream.finalMessage();
  const call = final.content.find((block) => block.type === "tool_use");
  let answer = null;
  if (call) {
    answer = await client.messages.create({
      model: spec.model,
      max_tokens: spec.maxTokens,
      tools: [spec.tool],
      messages: [
        ...asked,
        { role: "assistant", content: final.content },
        { role: "user", content: [{ type: "tool_result", tool_use_id: call.id, content: spec.result }] },
      ],
    });
  }
  const counted = await client.messages.countTokens({ model: spec.model, messages: asked, tools: [spec.tool] });
  console.log(JSON.stringify({ events, inputSnapshot, final, answer, counted }));
} catch (error) {
  console.log(
    JSON.stringify({ error: String(error?.message ?? error), name: error?.constructor?.name, status: error?.status }),
  );
  process.exit(1);
}
