// The calculator agent of calculator_openai.py, written in Node.js on the `openai` npm package and
// OpenAI's Responses API, and trained by turnrl as a process, as it is:
//
//     mkdir -p agent && cp src/turnrl/recipes/agents/calculator_node.mjs agent/
//     npm install --prefix agent openai
//     turnrl train calculator_agent model.path=smollm2-135m-instruct rollout.multi_turn.enable=false \
//         rollout.agent.command="node agent/calculator_node.mjs" \
//         rollout.agent.chat_template=examples/templates/chatml_tools.jinja
//
// (Node finds `openai` in a node_modules folder beside the script or above it, hence the copy.)
// `new OpenAI()` reads OPENAI_BASE_URL and OPENAI_API_KEY; the row is the JSON file at TURNRL_ROW_FILE
// and the model name TURNRL_MODEL (turnrl sets all four per episode). The tool is a function tool;
// the model calls it, the SDK hands back `function_call` items, each result goes back as a
// `function_call_output` item after the whole history so far, and the episode ends when the model
// answers without a call. The system line (as `instructions`), the worked exchange, the call budget,
// the tool (+ - * / evaluated by a parser, never eval) and the reward are calculator_openai.py's,
// written again here; tests/integration/test_calculator_agents.py checks that both score alike. The
// last line printed is the reward and the numbers validation reports, as JSON:
// {"reward":1,"acc":1,"formatted":1,"called_right":1,"calls":1}.

import { readFileSync, realpathSync } from "node:fs";
import { pathToFileURL } from "node:url";

export const TOOLS = [
  {
    type: "function",
    name: "calculator",
    description: "Evaluate an arithmetic expression exactly, e.g. '4821 * 739'.",
    parameters: {
      type: "object",
      properties: { expression: { type: "string", description: "+ - * / and parentheses" } },
      required: ["expression"],
    },
  },
];
export const SYSTEM = "You multiply with the calculator tool, then give the product alone as the answer.";
export const MAX_CALLS = 3;

const NUMBER = /^(\d[\d_]*(\.\d*)?|\.\d+)([eE][+-]?\d+)?/;

// + - * / over numbers and parentheses, unary minus, as calculator_openai.calculate reads them; an
// error is text the model reads. Products are exact below 2**53, as the task's are.
export function calculate(expression) {
  let pos = 0;
  const skip = () => {
    while (pos < expression.length && /\s/.test(expression[pos])) pos += 1;
  };
  const fail = (why) => {
    throw new SyntaxError(why);
  };
  const factor = () => {
    skip();
    if (expression[pos] === "-") {
      pos += 1;
      return -factor();
    }
    if (expression[pos] === "(") {
      pos += 1;
      const inner = sum();
      skip();
      if (expression[pos] !== ")") fail("'(' was never closed");
      pos += 1;
      return inner;
    }
    const match = NUMBER.exec(expression.slice(pos));
    if (!match) fail("only numbers and + - * /");
    pos += match[0].length;
    return Number(match[0].replaceAll("_", ""));
  };
  const product = () => {
    let value = factor();
    for (skip(); expression[pos] === "*" || expression[pos] === "/"; skip()) {
      const op = expression[pos];
      pos += 1;
      const right = factor();
      if (op === "/" && right === 0) fail("division by zero");
      value = op === "*" ? value * right : value / right;
    }
    return value;
  };
  const sum = () => {
    let value = product();
    for (skip(); expression[pos] === "+" || expression[pos] === "-"; skip()) {
      const op = expression[pos];
      pos += 1;
      value = op === "+" ? value + product() : value - product();
    }
    return value;
  };
  let result;
  try {
    // Python reads a leading blank as an indent, and an empty expression as a syntax error
    if (/^[ \t]/.test(expression)) fail("unexpected indent");
    result = sum();
    skip();
    if (pos < expression.length) fail("invalid syntax");
  } catch (err) {
    if (!(err instanceof SyntaxError)) throw err;
    return `error: ${err.message}`;
  }
  return Number.isInteger(result) ? BigInt(result).toString() : String(result);
}

const ANSWER_ALONE = /^\s*-?\d+\s*\.?\s*$/;

// calculator_openai.score: reward 1 for the right product as the answer's last number, 0.5 for a
// right calculator call without it, else 0; and the numbers validation reports apart from it.
export function score(answer, calledRight, calls, truth) {
  const numbers = answer.match(/-?\d+/g) ?? [];
  const correct = numbers.length > 0 && numbers[numbers.length - 1] === truth;
  const reward = correct ? 1.0 : calledRight ? 0.5 : 0.0;
  return {
    reward,
    acc: Number(correct),
    formatted: Number(ANSWER_ALONE.test(answer)),
    called_right: Number(calledRight),
    calls,
  };
}

// calculator_openai.worked_example's exchange as Responses input items; the arguments are the same
// JSON text as Python's json.dumps writes, so the model reads the same prompt.
export function workedExample(x, y) {
  return [
    { role: "user", content: `Compute ${x} * ${y}.` },
    {
      type: "function_call",
      call_id: "call_0",
      name: "calculator",
      arguments: `{"expression": "${x} * ${y}"}`,
    },
    { type: "function_call_output", call_id: "call_0", output: String(x * y) },
    { role: "assistant", content: String(x * y) },
  ];
}

function expressionOf(call) {
  try {
    const args = JSON.parse(call.arguments);
    const ok = args !== null && typeof args === "object" && !Array.isArray(args);
    return ok && args.expression !== undefined ? String(args.expression) : "";
  } catch {
    return "";
  }
}

// One episode on `row`: calls until an answer without a call (at most MAX_CALLS), then its score.
export async function episode(client, model, row) {
  const info = row.extra_info;
  const [x, y] = info.example.split("*").map((v) => Number.parseInt(v, 10));
  const truth = String(row.ground_truth);
  const input = [...workedExample(x, y), { role: "user", content: `Compute ${info.a} * ${info.b}.` }];
  let calledRight = false;
  let answer = "";
  let calls = 0;
  for (let turn = 0; turn < MAX_CALLS; turn += 1) {
    const response = await client.responses.create({
      model,
      instructions: SYSTEM,
      input,
      tools: TOOLS,
      max_output_tokens: 40,
    });
    const toolCalls = response.output.filter((item) => item.type === "function_call");
    if (toolCalls.length === 0) {
      answer = response.output_text ?? "";
      break;
    }
    input.push(...response.output);
    for (const call of toolCalls) {
      const result = calculate(expressionOf(call));
      calls += 1;
      calledRight = calledRight || result === truth;
      input.push({ type: "function_call_output", call_id: call.call_id, output: result });
    }
  }
  return score(answer, calledRight, calls, truth);
}

async function main() {
  // imported here, so the parts above load (and are tested) without the npm package
  const { default: OpenAI } = await import("openai");
  const row = JSON.parse(readFileSync(process.env.TURNRL_ROW_FILE, "utf8"));
  // no retries, as the Python agent's client: a retried call is one more sample of the same turn
  const client = new OpenAI({ maxRetries: 0 });
  console.log(JSON.stringify(await episode(client, process.env.TURNRL_MODEL, row)));
}

if (process.argv[1] && import.meta.url === pathToFileURL(realpathSync(process.argv[1])).href) {
  await main();
}
