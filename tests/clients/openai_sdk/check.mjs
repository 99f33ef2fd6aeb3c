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

check('errors are the SDK\'s typed errors', async () => {
  await assert.rejects(
      client.chat.completions.create({
        model: 'default', messages: [{ role: 'user', content: 'x' }],
        tools: [{ type: 'function', function: { name: 'f', parameters: {} } }],
      }),
      (e) => e instanceof OpenAI.BadRequestError && /tools/.test(e.message));
  await assert.rejects(
      client.completions.create({ model: 'default', prompt: 'x', n: 129 }),
      (e) => e instanceof OpenAI.BadRequestError && /n must be/.test(e.message));
  await assert.rejects(
      client.chat.completions.create({
        model: 'default', messages: [{ role: 'user', content: 'x' }], modalities: ['audio'],
      }),
      (e) => e instanceof OpenAI.BadRequestError && /modalities/.test(e.message));
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
