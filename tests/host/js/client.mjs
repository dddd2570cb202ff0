// The official AG-UI client (@ag-ui/client HttpAgent) against agentkeep's host: a two-turn
// conversation and a browser-tool round trip. Prints what the client holds as JSON lines.
// Usage: node client.mjs <agent url> <api key> <thread prefix>
import { HttpAgent } from "@ag-ui/client";
import { randomUUID } from "node:crypto";

const [url, key, prefix] = process.argv.slice(2);
const headers = { Authorization: `Bearer ${key}` };

function agentFor(thread) {
  return new HttpAgent({ url, headers, threadId: `${prefix}-${thread}` });
}

function say(agent, text) {
  agent.addMessage({ id: randomUUID(), role: "user", content: text });
}

const events = [];
const subscriber = { onEvent: ({ event }) => { events.push(event.type); } };

const chat = agentFor("chat");
say(chat, "hello");
await chat.runAgent({}, subscriber);
say(chat, "again");
await chat.runAgent({}, subscriber);
console.log(JSON.stringify({ part: "chat", messages: chat.messages, events }));

const weather = {
  name: "get_weather",
  description: "The weather in a city.",
  parameters: { type: "object", properties: { city: { type: "string" } }, required: ["city"] },
};
const tools = agentFor("tool");
say(tools, "weather in Paris?");
await tools.runAgent({ tools: [weather] });
const call = tools.messages.flatMap((m) => m.toolCalls ?? [])[0];
tools.addMessage({ id: randomUUID(), role: "tool", toolCallId: call.id, content: "sunny" });
await tools.runAgent({ tools: [weather] });
console.log(JSON.stringify({ part: "tool", messages: tools.messages }));
