// The official OpenAI Node SDK, unmodified, against a running tandem-router: every call a client
// makes with it and the shape it parses. Usage: node check.mjs <base URL ending in /v1> [api key]
// Exits 0 when every check passed; otherwise prints the failed check and exits 1.
import assert from 'node:assert/strict';
import OpenAI from 'openai';

const [baseURL, apiKey = 'unused'] = process.argv.slice(2);
const client = new OpenAI({ baseURL, apiKey, maxRetries: 0, timeout: 60_000 });

const checks = [];
const check = (name, fn) => checks.push([name, fn]);

check('models list and retrieve', async () => {
  const page = await client.models.list();
  assert.equal(page.data.length, 1);
  const card = await client.models.retrieve(page.data[0].id);
  assert.equal(card.id, page.data[0].id);
  assert.equal(card.object, 'model');
  assert.ok(page.data[0].max_model_len > 0);  // SGLang's and vLLM's card field
});

check('completions: n, logprobs, echo, usage counted once', async () => {
  const prompt = 'Once upon a time';
  const r = await client.completions.create({
    model: 'default', prompt, max_tokens: 6, temperature: 0.7, seed: 3, n: 2, logprobs: 2,
    echo: true, ignore_eos: true,  // SGLang's extension, sent as the SDK sends any extra key
  });
  assert.equal(r.object, 'text_completion');
  assert.equal(r.model, 'default');
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1]);
  for (const c of r.choices) {
    assert.ok(c.text.startsWith(prompt), c.text);
    assert.equal(c.logprobs.tokens.length, c.logprobs.token_logprobs.length);
    assert.equal(c.logprobs.token_logprobs[0], null);  // the prompt's first token
    assert.equal(c.logprobs.tokens.join(''), c.text);
    assert.equal(c.logprobs.text_offset[0], 0);
    for (const top of c.logprobs.top_logprobs.slice(1)) assert.ok(Object.keys(top).length >= 1);
    assert.ok(['length', 'stop'].includes(c.finish_reason));
  }
  assert.equal(r.usage.total_tokens, r.usage.prompt_tokens + r.usage.completion_tokens);
  assert.equal(r.usage.completion_tokens, 12);  // 2 choices x 6 tokens
});

check('completions: a list of prompts and max_tokens 0', async () => {
  const r = await client.completions.create({
    model: 'default', prompt: ['Love is', 'The sea'], max_tokens: 0,
  });
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1]);
  for (const c of r.choices) {
    assert.equal(c.text, '');
    assert.equal(c.finish_reason, 'length');
  }
  assert.equal(r.usage.completion_tokens, 0);
});

check('chat: n, seed, logprobs with text and bytes', async () => {
  const r = await client.chat.completions.create({
    model: 'default', messages: [{ role: 'user', content: 'Tell me a fortune.' }], max_tokens: 8,
    n: 3, seed: 7, temperature: 0.9, logprobs: true, top_logprobs: 2,
  });
  assert.equal(r.object, 'chat.completion');
  assert.deepEqual(r.choices.map((c) => c.index), [0, 1, 2]);
  for (const c of r.choices) {
    assert.equal(c.message.role, 'assistant');
    assert.equal(typeof c.message.content, 'string');
    const content = c.logprobs.content;
    assert.ok(content.length >= 1);
    let bytes = [];
    for (const t of content) {
      assert.equal(typeof t.token, 'string');
      assert.ok(!t.token.startsWith('token_id:'), t.token);
      assert.ok(Array.isArray(t.bytes) && t.bytes.every((b) => Number.isInteger(b)));
      assert.equal(t.top_logprobs.length, 2);
      bytes = bytes.concat(t.bytes);
    }
    assert.equal(Buffer.from(bytes).toString('utf8'), c.message.content);
  }
  // Seeded: the same request gives the same choices.
  const again = await client.chat.completions.create({
    model: 'default', messages: [{ role: 'user', content: 'Tell me a fortune.' }], max_tokens: 8,
    n: 3, seed: 7, temperature: 0.9,
  });
  assert.deepEqual(again.choices.map((c) => c.message.content),
                   r.choices.map((c) => c.message.content));
});

check('chat stream: n 2 with include_usage', async () => {
  const stream = await client.chat.completions.create({
    model: 'default', messages: [{ role: 'user', content: 'Tell me a fortune.' }], max_tokens: 6,
    n: 2, temperature: 0, stream: true, stream_options: { include_usage: true }, ignore_eos: true,
  });
  const text = ['', ''];
  const roles = [null, null];
  const finish = [null, null];
  let usage = null;
  for await (const chunk of stream) {
    assert.equal(chunk.object, 'chat.completion.chunk');
    if (chunk.usage) {
      usage = chunk.usage;
      assert.equal(chunk.choices.length, 0);
      continue;
    }
    for (const c of chunk.choices) {
      if (roles[c.index] === null) roles[c.index] = c.delta.role;
      text[c.index] += c.delta.content ?? '';
      if (c.finish_reason) finish[c.index] = c.finish_reason;
    }
  }
  assert.deepEqual(roles, ['assistant', 'assistant']);
  assert.deepEqual(finish.map((f) => f !== null), [true, true]);
  assert.equal(text[0], text[1]);  // greedy: both choices the same
  assert.ok(usage !== null);
  assert.equal(usage.completion_tokens, 12);
});

check('completions stream', async () => {
  const stream = await client.completions.create({
    model: 'default', prompt: 'Love is', max_tokens: 5, temperature: 0, stream: true,
  });
  let text = '';
  let finish = null;
  for await (const chunk of stream) {
    text += chunk.choices[0].text;
    finish = chunk.choices[0].finish_reason ?? finish;
  }
  const whole = await client.completions.create({
    model: 'default', prompt: 'Love is', max_tokens: 5, temperature: 0,
  });
  assert.equal(text, whole.choices[0].text);
  assert.equal(finish, whole.choices[0].finish_reason);
});

// The JSON Schema subset the tool and response_format checks use: every failure is thrown.
function validate(value, schema, path = '$', root = schema) {
  const fail = (why) => { throw new Error(`${path}: ${why} (${JSON.stringify(value)})`); };
  if (schema.$ref) {  // '#/$defs/x' within the same parameters schema
    const target = schema.$ref.slice(2).split('/').reduce((node, key) => node[key], root);
    validate(value, target, path, root);
    return;
  }
  if (schema.minimum !== undefined && value < schema.minimum) fail('below minimum');
  if (schema.maximum !== undefined && value > schema.maximum) fail('above maximum');
  if (schema.minLength !== undefined && [...value].length < schema.minLength) fail('too short');
  if (schema.maxLength !== undefined && [...value].length > schema.maxLength) fail('too long');
  if (schema.enum && !schema.enum.some((e) => JSON.stringify(e) === JSON.stringify(value))) {
    fail('not in enum');
  }
  switch (schema.type) {
    case 'object':
      if (value === null || typeof value !== 'object' || Array.isArray(value)) fail('not an object');
      for (const key of schema.required ?? []) if (!(key in value)) fail(`lacks ${key}`);
      for (const [key, v] of Object.entries(value)) {
        if (schema.properties?.[key]) validate(v, schema.properties[key], `${path}.${key}`, root);
        else if (schema.additionalProperties === false) fail(`extra key ${key}`);
      }
      break;
    case 'array':
      if (!Array.isArray(value)) fail('not an array');
      if (schema.maxItems !== undefined && value.length > schema.maxItems) fail('too many items');
      if (schema.minItems !== undefined && value.length < schema.minItems) fail('too few items');
      value.forEach((v, i) => schema.items && validate(v, schema.items, `${path}[${i}]`, root));
      break;
    case 'string': if (typeof value !== 'string') fail('not a string'); break;
    case 'integer': if (!Number.isInteger(value)) fail('not an integer'); break;
    case 'number': if (typeof value !== 'number') fail('not a number'); break;
    case 'boolean': if (typeof value !== 'boolean') fail('not a boolean'); break;
    default: break;
  }
}

const weatherTool = {
  type: 'function',
  function: {
    name: 'get_weather',
    description: 'The weather in a city',
    parameters: {
      type: 'object',
      properties: {
        city: { type: 'string', enum: ['Paris', 'Oslo', 'Lima'] },
        days: { type: 'integer' },
        hourly: { type: 'boolean' },
      },
      required: ['city', 'days'],
      additionalProperties: false,
    },
  },
};
const fortuneTool = {
  type: 'function',
  function: { name: 'tell_fortune', parameters: { type: 'object', properties: {} } },
};
const byName = { get_weather: weatherTool, tell_fortune: fortuneTool };

function checkCall(call) {
  assert.equal(call.type, 'function');
  assert.match(call.id, /^call_[0-9a-f]{24}$/);
  const tool = byName[call.function.name];
  assert.ok(tool, `unknown function ${call.function.name}`);
  validate(JSON.parse(call.function.arguments), tool.function.parameters);
}

check('chat: tools with tool_choice required give a valid call', async () => {
  for (const seed of [1, 2, 3]) {
    const r = await client.chat.completions.create({
      model: 'default', messages: [{ role: 'user', content: 'Weather in Paris for 3 days?' }],
      tools: [weatherTool, fortuneTool], tool_choice: 'required', parallel_tool_calls: false,
      max_tokens: 120, temperature: 1, seed,
    });
    const c = r.choices[0];
    assert.equal(c.finish_reason, 'tool_calls', JSON.stringify(c));
    assert.equal(c.message.content, null);
    assert.equal(c.message.tool_calls.length, 1);
    checkCall(c.message.tool_calls[0]);
  }
});

check('chat: a named tool_choice calls that function', async () => {
  const r = await client.chat.completions.create({
    model: 'default', messages: [{ role: 'user', content: 'Anything.' }],
    tools: [fortuneTool, weatherTool],
    tool_choice: { type: 'function', function: { name: 'get_weather' } },
    max_tokens: 120, temperature: 0.8, seed: 5,
  });
  const c = r.choices[0];
  assert.equal(c.finish_reason, 'tool_calls');
  assert.equal(c.message.tool_calls[0].function.name, 'get_weather');
  checkCall(c.message.tool_calls[0]);
});

const bookTool = {
  type: 'function',
  function: {
    name: 'book_table',
    parameters: {
      type: 'object',
      properties: {
        guest: { $ref: '#/$defs/name' },
        seats: { type: 'integer', minimum: 1, maximum: 12 },
        hour: { type: 'integer', minimum: 17, maximum: 22 },
      },
      required: ['guest', 'seats', 'hour'],
      additionalProperties: false,
      $defs: { name: { type: 'string', minLength: 2, maxLength: 10 } },
    },
  },
};
byName.book_table = bookTool;

check('chat: tool parameters with $ref, integer bounds and string lengths validate', async () => {
  for (const seed of [1, 2, 3]) {
    for (const stream of [false, true]) {
      const request = {
        model: 'default', messages: [{ role: 'user', content: 'A table for two at 8pm.' }],
        tools: [bookTool], tool_choice: 'required', parallel_tool_calls: false, max_tokens: 120,
        temperature: 1, seed,
      };
      let call;
      if (!stream) {
        const r = await client.chat.completions.create(request);
        assert.equal(r.choices[0].finish_reason, 'tool_calls', JSON.stringify(r.choices[0]));
        call = r.choices[0].message.tool_calls[0];
      } else {
        const chunks = await client.chat.completions.create({ ...request, stream: true });
        for await (const chunk of chunks) {
          for (const t of chunk.choices[0]?.delta.tool_calls ?? []) {
            call ??= { id: t.id, type: t.type, function: { name: '', arguments: '' } };
            call.function.name += t.function?.name ?? '';
            call.function.arguments += t.function?.arguments ?? '';
          }
        }
      }
      checkCall(call);
    }
  }
});

check('chat stream: tool_choice required streams the call as a delta', async () => {
  const stream = await client.chat.completions.create({
    model: 'default', messages: [{ role: 'user', content: 'Weather in Oslo?' }],
    tools: [weatherTool], tool_choice: 'required', parallel_tool_calls: false, max_tokens: 120,
    temperature: 1, seed: 9, stream: true,
  });
  const calls = [];
  let finish = null;
  let content = '';
  for await (const chunk of stream) {
    for (const c of chunk.choices) {
      content += c.delta.content ?? '';
      for (const t of c.delta.tool_calls ?? []) {
        if (calls[t.index] === undefined) {
          calls[t.index] = { id: t.id, type: t.type, function: { name: '', arguments: '' } };
        }
        calls[t.index].function.name += t.function?.name ?? '';
        calls[t.index].function.arguments += t.function?.arguments ?? '';
      }
      if (c.finish_reason) finish = c.finish_reason;
    }
  }
  assert.equal(finish, 'tool_calls');
  assert.equal(content, '');
  assert.equal(calls.length, 1);
  checkCall(calls[0]);
});

check('chat: parallel tool calls are each valid', async () => {
  // A small model may keep calling until max_tokens; every finished call still validates.
  const r = await client.chat.completions.create({
    model: 'default', messages: [{ role: 'user', content: 'Weather in Paris and Lima?' }],
    tools: [weatherTool, fortuneTool], tool_choice: 'required', max_tokens: 120, temperature: 1,
    seed: 11,
  });
  const c = r.choices[0];
  assert.ok(['tool_calls', 'length'].includes(c.finish_reason), c.finish_reason);
  assert.ok(c.message.tool_calls.length >= 1);
  for (const call of c.message.tool_calls) checkCall(call);
});

check('chat: a tool conversation is accepted and answered', async () => {
  const r = await client.chat.completions.create({
    model: 'default', tools: [weatherTool], max_tokens: 8,
    messages: [
      { role: 'user', content: 'Weather in Lima?' },
      { role: 'assistant', content: null, tool_calls: [{
        id: 'call_1', type: 'function',
        function: { name: 'get_weather', arguments: '{"city": "Lima", "days": 1}' } }] },
      { role: 'tool', tool_call_id: 'call_1', content: 'Sunny, 24 C' },
    ],
  });
  assert.equal(r.choices[0].message.role, 'assistant');
});

check('chat: response_format json_schema output validates', async () => {
  const schema = weatherTool.function.parameters;
  for (const stream of [false, true]) {
    const args = {
      model: 'default', messages: [{ role: 'user', content: 'Weather as JSON.' }],
      response_format: { type: 'json_schema', json_schema: { name: 'weather', schema } },
      max_tokens: 120, temperature: 1, seed: 4,
    };
    let text = '';
    if (stream) {
      for await (const chunk of await client.chat.completions.create({ ...args, stream: true })) {
        text += chunk.choices[0]?.delta?.content ?? '';
      }
    } else {
      text = (await client.chat.completions.create(args)).choices[0].message.content;
    }
    validate(JSON.parse(text), schema);
  }
});

check('chat: the SDK\'s stream helper and parse() assemble and parse the answer', async () => {
  // developer role, text parts and a user name, as LangChain-style callers send them.
  const messages = [
    { role: 'developer', content: 'Answer briefly.' },
    {
      role: 'user', name: 'ana',
      content: [{ type: 'text', text: 'A fortune, ' }, { type: 'text', text: 'please.' }],
    },
  ];
  const stream = client.chat.completions.stream({
    model: 'default', messages, max_completion_tokens: 6, seed: -3, temperature: 0.8,
    stream_options: { include_usage: true },
  });
  const final = await stream.finalChatCompletion();  // throws without role or finish_reason
  assert.equal(final.choices[0].message.role, 'assistant');
  assert.equal(final.choices[0].finish_reason, 'length');
  assert.equal(final.usage.completion_tokens, 6);
  // A negative seed is in OpenAI's int64 range (sent above too).
  const seeded = await client.chat.completions.create({
    model: 'default', messages, max_completion_tokens: 6, seed: -(2 ** 62), temperature: 0.8,
  });
  assert.equal(seeded.usage.completion_tokens, 6);

  // Greedy and bounded, so the answer ends well inside the budget: parse() throws on a
  // finish_reason of "length", which a sampled answer (digits, whitespace) can reach.
  const schema = {
    type: 'object', properties: { n: { type: 'integer', minimum: 0, maximum: 999 } },
    required: ['n'], additionalProperties: false,
  };
  const parsed = await client.chat.completions.parse({
    model: 'default', messages, max_completion_tokens: 30, temperature: 0,
    response_format: { type: 'json_schema', json_schema: { name: 'count', strict: true, schema } },
  });
  assert.equal(typeof parsed.choices[0].message.parsed.n, 'number');
});

check('completions: response_format json_object constrains the text', async () => {
  const r = await client.completions.create({
    model: 'default', prompt: 'Data:', max_tokens: 40, temperature: 1, seed: 5,
    response_format: { type: 'json_object' },
  });
  const value = JSON.parse(r.choices[0].text);
  assert.equal(typeof value, 'object');
  assert.ok(value !== null && !Array.isArray(value));
});

// The Responses API: function tools are flat ({type, name, parameters}).
const flatTool = (tool) => ({ type: 'function', ...tool.function });

check('responses: create, output_text, usage, retrieve, input items, delete', async () => {
  const r = await client.responses.create({
    model: 'default', instructions: 'Answer briefly.', input: 'Tell me a fortune.',
    max_output_tokens: 6, temperature: 0.8, metadata: { session: 'sdk-check' },
  });
  assert.equal(r.object, 'response');
  assert.match(r.id, /^resp_[0-9a-f]{32}$/);
  assert.equal(r.status, 'incomplete');  // cut at max_output_tokens
  assert.equal(r.incomplete_details.reason, 'max_output_tokens');
  assert.equal(r.output[0].type, 'message');
  assert.equal(r.output[0].role, 'assistant');
  assert.equal(r.output_text, r.output[0].content[0].text);  // the SDK's own join
  assert.ok(r.output_text.length > 0);
  assert.equal(r.usage.output_tokens, 6);
  assert.equal(r.usage.total_tokens, r.usage.input_tokens + r.usage.output_tokens);
  assert.equal(r.instructions, 'Answer briefly.');
  assert.deepEqual(r.metadata, { session: 'sdk-check' });
  assert.equal(r.temperature, 0.8);

  const again = await client.responses.retrieve(r.id);
  assert.equal(again.id, r.id);
  assert.equal(again.output_text, r.output_text);
  const items = [];
  for await (const item of client.responses.inputItems.list(r.id)) items.push(item);
  assert.equal(items.length, 1);
  assert.equal(items[0].role, 'user');
  assert.equal(items[0].content[0].text, 'Tell me a fortune.');
  await client.responses.delete(r.id);
  await assert.rejects(client.responses.retrieve(r.id), (e) => e instanceof OpenAI.NotFoundError);
  // store: false keeps nothing.
  const unstored = await client.responses.create({
    model: 'default', input: 'Hi.', max_output_tokens: 2, store: false,
  });
  assert.equal(unstored.store, false);
  await assert.rejects(client.responses.retrieve(unstored.id),
      (e) => e instanceof OpenAI.NotFoundError);
});

check('responses: the stream helper assembles what the events said', async () => {
  const stream = client.responses.stream({
    model: 'default', input: [{ role: 'user', content: [{ type: 'input_text', text: 'Hello.' }] }],
    max_output_tokens: 8, temperature: 0.9, seed: 2,
  });
  const types = [];
  let deltas = '';
  let last = -1;
  for await (const event of stream) {
    types.push(event.type);
    assert.equal(event.sequence_number, last + 1);
    last = event.sequence_number;
    if (event.type === 'response.output_text.delta') deltas += event.delta;
  }
  const final = await stream.finalResponse();
  assert.equal(types[0], 'response.created');
  assert.equal(types[1], 'response.in_progress');
  assert.equal(types.at(-1), 'response.incomplete');
  for (const t of ['response.output_item.added', 'response.content_part.added',
                   'response.output_text.done', 'response.content_part.done',
                   'response.output_item.done']) {
    assert.ok(types.includes(t), `${t} missing from ${types}`);
  }
  // The helper's final response is what it accumulated (it takes the last event's response
  // only from response.completed, and adds no output_text of its own).
  assert.equal(final.output[0].content[0].text, deltas);
  // The stream's response was stored as it ended, whole.
  const stored = await client.responses.retrieve(final.id);
  assert.equal(stored.output_text, deltas);
  assert.equal(stored.status, 'incomplete');
  assert.equal(stored.usage.output_tokens, 8);
});

check('responses: previous_response_id continues the conversation', async () => {
  const first = await client.responses.create({
    model: 'default', input: 'Name a city.', max_output_tokens: 5, temperature: 0,
  });
  const second = await client.responses.create({
    model: 'default', input: 'Why that one?', previous_response_id: first.id,
    max_output_tokens: 5, temperature: 0,
  });
  assert.equal(second.previous_response_id, first.id);
  // The earlier turn and its answer are part of the prompt.
  assert.ok(second.usage.input_tokens > first.usage.input_tokens + 4,
      `${second.usage.input_tokens} vs ${first.usage.input_tokens}`);
  await assert.rejects(
      client.responses.create({
        model: 'default', input: 'x', previous_response_id: 'resp_00000000000000000000000000000000',
      }),
      (e) => e instanceof OpenAI.NotFoundError && /previous_response_id/.test(e.message));
});

check('responses: function tools give a function_call, and its output is taken back', async () => {
  for (const stream of [false, true]) {
    const request = {
      model: 'default', input: 'Weather in Paris for 3 days?',
      tools: [flatTool(weatherTool), flatTool(fortuneTool)], tool_choice: 'required',
      parallel_tool_calls: false, max_output_tokens: 120, temperature: 1, seed: 3,
    };
    const r = stream ? await client.responses.stream(request).finalResponse()
                     : await client.responses.create(request);
    const calls = r.output.filter((item) => item.type === 'function_call');
    assert.equal(calls.length, 1, JSON.stringify(r.output));
    const call = calls[0];
    assert.match(call.call_id, /^call_[0-9a-f]{24}$/);
    checkCall({ id: call.call_id, type: 'function',
                function: { name: call.name, arguments: call.arguments } });
    const answer = await client.responses.create({
      model: 'default', previous_response_id: r.id, max_output_tokens: 6,
      tools: [flatTool(weatherTool), flatTool(fortuneTool)],
      input: [{ type: 'function_call_output', call_id: call.call_id, output: 'Sunny, 24 C' }],
    });
    assert.equal(answer.output.at(-1).type, 'message');
  }
  // A conversation sent whole: the call and its output as input items.
  const whole = await client.responses.create({
    model: 'default', tools: [flatTool(weatherTool)], max_output_tokens: 6,
    input: [
      { role: 'user', content: 'Weather in Lima?' },
      { type: 'function_call', call_id: 'call_1', name: 'get_weather',
        arguments: '{"city": "Lima", "days": 1}' },
      { type: 'function_call_output', call_id: 'call_1', output: 'Sunny, 24 C' },
    ],
  });
  assert.equal(whole.output[0].type, 'message');
});

check('responses: text.format json_schema output validates', async () => {
  const schema = weatherTool.function.parameters;
  const r = await client.responses.create({
    model: 'default', input: 'Weather as JSON.', max_output_tokens: 120, temperature: 1, seed: 4,
    text: { format: { type: 'json_schema', name: 'weather', schema, strict: true } },
  });
  validate(JSON.parse(r.output_text), schema);
  assert.equal(r.text.format.name, 'weather');
});

check('responses: logprobs on the message text, streamed and not', async () => {
  const request = {
    model: 'default', input: 'Hello.', max_output_tokens: 5, temperature: 0.7, seed: 6,
    include: ['message.output_text.logprobs'], top_logprobs: 2,
  };
  const r = await client.responses.create(request);
  const part = r.output[0].content[0];
  assert.equal(part.logprobs.length, 5);
  for (const entry of part.logprobs) {
    assert.equal(typeof entry.token, 'string');
    assert.ok(entry.logprob <= 0);
    assert.ok(Array.isArray(entry.bytes));
    assert.equal(entry.top_logprobs.length, 2);
  }
  let streamed = 0;
  for await (const event of await client.responses.create({ ...request, stream: true })) {
    if (event.type === 'response.output_text.delta') streamed += event.logprobs.length;
  }
  assert.equal(streamed, 5);
});

check('responses: what is not served is a typed error naming it', async () => {
  await assert.rejects(
      client.responses.create({
        model: 'default', input: 'x', tools: [{ type: 'web_search' }],
      }),
      (e) => e instanceof OpenAI.BadRequestError && /web_search/.test(e.message));
  await assert.rejects(
      client.responses.create({
        model: 'default',
        input: [{ role: 'user', content: [{ type: 'input_image', image_url: 'http://x/y.png' }] }],
      }),
      (e) => e instanceof OpenAI.BadRequestError && /input_image/.test(e.message));
  await assert.rejects(
      client.responses.create({ model: 'default', input: 'x', background: true }),
      (e) => e instanceof OpenAI.BadRequestError && /background/.test(e.message));
  await assert.rejects(
      client.responses.create({ model: 'nope', input: 'x' }),
      (e) => e instanceof OpenAI.NotFoundError);
});

check('errors are the SDK\'s typed errors', async () => {
  await assert.rejects(
      client.chat.completions.create({
        model: 'default', messages: [{ role: 'user', content: 'x' }],
        tools: [{ type: 'function', function: { name: 'f', parameters: {} } }],
        tool_choice: { type: 'function', function: { name: 'g' } },
      }),
      (e) => e instanceof OpenAI.BadRequestError && /tool_choice/.test(e.message));
  await assert.rejects(
      client.completions.create({ model: 'default', prompt: 'x', n: 129 }),
      (e) => e instanceof OpenAI.BadRequestError && /n must be/.test(e.message));
  await assert.rejects(
      client.chat.completions.create({
        model: 'default', messages: [{ role: 'user', content: 'x' }], modalities: ['audio'],
      }),
      (e) => e instanceof OpenAI.BadRequestError && /modalities/.test(e.message));
  // The legacy function API is refused, not answered as if no call were wanted.
  await assert.rejects(
      client.chat.completions.create({
        model: 'default', messages: [{ role: 'user', content: 'x' }],
        functions: [{ name: 'f', parameters: { type: 'object' } }],
      }),
      (e) => e instanceof OpenAI.BadRequestError && /functions/.test(e.message) &&
          e.type === 'invalid_request_error' && e.param === null);
  // SGLang's extensions we do not serve are named, not ignored.
  await assert.rejects(
      client.completions.create({ model: 'default', prompt: 'x', stop_regex: '\\d' }),
      (e) => e instanceof OpenAI.BadRequestError && /stop_regex/.test(e.message));
});

let failed = 0;
for (const [name, fn] of checks) {
  try {
    await fn();
    console.log(`ok   ${name}`);
  } catch (e) {
    failed += 1;
    console.log(`FAIL ${name}: ${e.stack ?? e}`);
  }
}
process.exit(failed === 0 ? 0 : 1);
