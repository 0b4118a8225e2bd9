// @anthropic-ai/sdk's messages.stream() helper with one tool and a forced tool_choice, then
// messages.create() with the tool's result, and messages.countTokens().
// Input: one JSON argument {baseURL, model, prompt, tool: {name, description, input_schema}, toolChoice,
// maxTokens, result}. Output: one JSON line on stdout: the helper's final message, the input it reported
// for the call (its own "inputJson" snapshots' last), the answer to the tool's result, the count, and
// every exchange as it went over the wire (path, request body, status, headers, response text), for the
// suite to judge. A client error is a JSON line {error, name, status} and exit status 1.
import Anthropic from "@anthropic-ai/sdk";

const spec = JSON.parse(process.argv[2]);
const exchanges = [];

// The SDK's own fetch, with a copy of each response read beside it (not before it: the stream helper
// still reads the events as they come).
async function recordingFetch(url, init) {
  const response = await fetch(url, init);
  const copy = response.clone();
  exchanges.push(
    copy.text().then((text) => ({
      path: new URL(String(url)).pathname,
      request: JSON.parse(init.body),
      status: response.status,
      headers: Object.fromEntries(response.headers),
      body: text,
    })),
  );
  return response;
}

const client = new Anthropic({
  baseURL: spec.baseURL,
  apiKey: "not-checked",
  maxRetries: 0,
  fetch: recordingFetch,
});

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
  const wire = await Promise.all(exchanges);
  console.log(JSON.stringify({ events, inputSnapshot, final, answer, counted, exchanges: wire }));
} catch (error) {
  console.log(
    JSON.stringify({ error: String(error?.message ?? error), name: error?.constructor?.name, status: error?.status }),
  );
  process.exit(1);
}
