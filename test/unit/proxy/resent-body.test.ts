import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { jsonValueDepth } from '../../../src/proxy/json-value-depth.js';
import { BodyNestingError, ResentBody } from '../../../src/proxy/resent-body.js';

const DEPTH = 64;

/** What `ResentBody.parse` must give: `JSON.parse`'s value, or its error (or the nesting error past the limit). */
function expected(text: string): { value: unknown } | { error: string } {
  try {
    return { value: JSON.parse(text) as unknown };
  } catch (err) {
    return { error: (err as Error).message };
  }
}

function check(r: ResentBody, text: string): unknown {
  const want = expected(text);
  let got: { value: unknown } | { error: string };
  try {
    got = { value: r.parse(Buffer.from(text)) };
  } catch (err) {
    if (err instanceof BodyNestingError) {
      expect(jsonValueDepth(JSON.parse(text), DEPTH)).toBeGreaterThan(DEPTH);
      return undefined;
    }
    got = { error: (err as Error).message };
  }
  expect(got).toEqual(want);
  // Key order and own `__proto__` keys too, which toEqual does not see.
  if ('value' in got && 'value' in want) expect(JSON.stringify(got.value)).toBe(JSON.stringify(want.value));
  return 'value' in got ? got.value : undefined;
}

/** A body as an agent writes it: fields before the history, the history, fields after. */
interface Shape {
  before: string;
  items: unknown[];
  sep: string;
  after: string;
}
const text = (s: Shape): string => `{${s.before}"messages":[${s.items.map((m) => JSON.stringify(m)).join(s.sep)}]${s.after}}`;

const message = fc.oneof(
  fc.record({ role: fc.constantFrom('user', 'assistant', 'tool'), content: fc.string({ unit: 'binary' }) }),
  fc.record({ role: fc.constant('assistant'), content: fc.string(), tool_calls: fc.array(fc.record({ id: fc.string(), function: fc.record({ name: fc.string(), arguments: fc.jsonValue({ maxDepth: 4 }).map((v) => JSON.stringify(v)) }) }), { maxLength: 2 }) }),
  fc.jsonValue({ maxDepth: 5 }),
);

/** What changes from one body to the next. */
const step = fc.oneof(
  { weight: 6, arbitrary: fc.record({ kind: fc.constant('grow' as const), add: fc.array(message, { minLength: 1, maxLength: 3 }) }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('edit' as const), at: fc.nat(), m: message }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('cut' as const), keep: fc.nat() }) },
  { weight: 1, arbitrary: fc.constant({ kind: 'same' as const }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('before' as const), v: fc.constantFrom('', '"model":"a",', '"model":"b", "stream":true,', ' "max_tokens" : 64 ,', '"__proto__":{"p":1},', '"tools":1,') }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('after' as const), v: fc.constantFrom('', ',"tools":[{"a":"]"}]', ', "stream" : true', ',"messages":[]', ',"messages":[{"role":"user","content":"x"}]', ',"m\\u0065ssages":[1]', ',"x":"\\"],"messages":[2]"', ',"tools":[,]', ',', ',"x":1 "y":2', ',"model":"z","a":1,"a":[2]', ',"__proto__":{"q":2}', ',"tools":[{"n":"t","p":{"type":"object"}}],"system":"s"', ',"tools":[{"n":"t","p":{"type":"object"}}],"system":"t"') }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('sep' as const), v: fc.constantFrom(',', ', ', ' ,\n ', ',,') }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('raw' as const), v: fc.constantFrom(',]', ', ]', ',{"a":', ',{"a":"\\', ',' + '['.repeat(70) + ']'.repeat(70), ',[1,2', ',"\\"]') }) },
);

describe('ResentBody', () => {
  it('gives what JSON.parse gives for every body of a conversation that grows, is edited, cut, re-sent and re-formatted', () => {
    fc.assert(
      fc.property(fc.array(message, { minLength: 1, maxLength: 4 }), fc.array(step, { minLength: 1, maxLength: 25 }), (first, steps) => {
        const r = new ResentBody('messages', DEPTH);
        const s: Shape = { before: '"model":"m",', items: first, sep: ',', after: ',"stream":true' };
        check(r, text(s));
        for (const st of steps) {
          let body: string | null = null;
          if (st.kind === 'grow') s.items = [...s.items, ...st.add];
          else if (st.kind === 'edit' && s.items.length > 0) s.items = s.items.map((m, i) => (i === st.at % s.items.length ? st.m : m));
          else if (st.kind === 'cut') s.items = s.items.slice(0, st.keep % (s.items.length + 1));
          else if (st.kind === 'before') s.before = st.v;
          else if (st.kind === 'after') s.after = st.v;
          else if (st.kind === 'sep') s.sep = st.v;
          else if (st.kind === 'raw') body = text(s).replace(/\]([^\]]*)\}$/, `${st.v}]$1}`);
          check(r, body ?? text(s));
        }
      }),
      { numRuns: 400 },
    );
  });

  it('reuses the re-sent items: the same objects as the previous body gave, only the new ones parsed', () => {
    const r = new ResentBody('messages', DEPTH);
    const items: unknown[] = [{ role: 'system', content: 'You are "x" \\ y' }, { role: 'user', content: 'héllo ]}' }];
    let prev = check(r, JSON.stringify({ model: 'm', messages: items, tools: [{ a: 1 }] })) as { messages: unknown[] };
    for (let i = 0; i < 20; i++) {
      items.push({ role: 'assistant', content: `answer ${i} "]"` }, { role: 'user', content: `again ${i}` });
      const got = check(r, JSON.stringify({ model: 'm', messages: items, tools: [{ a: 1 }] })) as { messages: unknown[] };
      for (let j = 0; j < prev.messages.length - 1; j++) expect(got.messages[j]).toBe(prev.messages[j]);
      prev = got;
    }
  });

  it('reuses the members after the history too when they are the previous body\'s byte for byte', () => {
    const r = new ResentBody('messages', DEPTH);
    const tools = [{ name: 'bash', parameters: { type: 'object', properties: { cmd: { type: 'string' } } } }];
    const items: unknown[] = [{ role: 'user', content: 'a' }];
    const a = check(r, JSON.stringify({ model: 'm', messages: items, tools, stream: true })) as Record<string, unknown>;
    items.push({ role: 'assistant', content: 'b' }, { role: 'user', content: 'c' });
    const b = check(r, JSON.stringify({ model: 'm', messages: items, tools, stream: true })) as Record<string, unknown>;
    expect(b.tools).toBe(a.tools);
    expect(Object.keys(b)).toEqual(['model', 'messages', 'tools', 'stream']);
    items.push({ role: 'assistant', content: 'd' }, { role: 'user', content: 'e' });
    const c = check(r, JSON.stringify({ model: 'm', messages: items, tools: [...tools, { name: 'x' }], stream: true })) as Record<string, unknown>;
    expect(c.tools).not.toBe(b.tools);
  });

  it('keeps the last of two history keys, as JSON.parse does, and refuses a trailing comma after the re-sent items', () => {
    const r = new ResentBody('messages', DEPTH);
    check(r, '{"messages":[{"a":1},{"b":2}]}');
    expect(check(r, '{"messages":[{"a":1},{"b":2},{"c":3}],"messages":[{"z":0}]}')).toEqual({ messages: [{ z: 0 }] });
    check(r, '{"messages":[{"a":1},{"b":2}]}');
    expect(() => r.parse(Buffer.from('{"messages":[{"a":1},{"b":2},]}'))).toThrow(SyntaxError);
    expect(check(r, '{"messages":[{"a":1},{"b":2},{"c":3}]}')).toEqual({ messages: [{ a: 1 }, { b: 2 }, { c: 3 }] });
  });

  it('refuses a new item nested past the limit, and the next body is read as before', () => {
    const r = new ResentBody('messages', DEPTH);
    check(r, '{"messages":[{"a":1}]}');
    const deep = '['.repeat(DEPTH) + ']'.repeat(DEPTH);
    expect(() => r.parse(Buffer.from(`{"messages":[{"a":1},${deep}]}`))).toThrow(BodyNestingError);
    const shallow = '['.repeat(DEPTH - 2) + ']'.repeat(DEPTH - 2);
    expect(check(r, `{"messages":[{"a":1},${shallow}]}`)).toEqual(JSON.parse(`{"messages":[{"a":1},${shallow}]}`));
    expect(() => r.parse(Buffer.from(`{"messages":[{"a":1},${shallow},${deep}]}`))).toThrow(BodyNestingError);
  });

  it('reads a client whose bodies never repeat the previous bytes', () => {
    const r = new ResentBody('messages', DEPTH);
    const items: unknown[] = [];
    for (let i = 0; i < 30; i++) {
      items.push({ role: 'user', content: `m${i}` });
      expect(check(r, JSON.stringify({ n: i, messages: items }))).toEqual({ n: i, messages: items });
    }
  });
});
