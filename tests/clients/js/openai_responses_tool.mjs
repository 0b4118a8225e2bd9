// openai-node's client.responses.create() with one function tool and a forced tool_choice, streamed.
// Input: one JSON argument {baseURL, model, prompt, tool: {name, description, parameters}, toolChoice}
// (toolChoice as the Responses API writes it: "required" or {type: "function", name}). Output: one JSON
// line on stdout: the event types and the Response the last event carried. A client error is a JSON line
// {error, name, status} and exit status 1.
import OpenAI from "openai";

const spec = JSON.parse(process.argv[2]);
const client = new OpenAI({ baseURL: spec.baseURL, apiKey: "not-checked", maxRetries: 0 });

try {
  const stream = await client.responses.create({
    model: spec.model,
    input: spec.prompt,
    tools: [{ type: "function", ...spec.tool }],
    tool_choice: spec.toolChoice,
    stream: true,
  });
  const types = [];
  let response = null;
  for await (const event of stream) {
    types.push(event.type);
    if (event.response) {
      response = event.response;
    }
  }
  console.log(JSON.stringify({ types, response }));
} catch (error) {
  console.log(
    JSON.stringify({ error: String(error?.message ?? error), name: error?.constructor?.name, status: error?.status }),
  );
  process.exit(1);
}
