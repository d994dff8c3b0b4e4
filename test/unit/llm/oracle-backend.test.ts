import { describe, expect, it } from 'vitest';
import { isOracleAddress, OracleBackend, oracleSpec, ORACLE_URL } from '../../../src/llm/oracle-backend.js';
import type { GenerateRequest } from '../../../src/llm/llm-client.js';
import { TestCodec } from '../../../src/testing/test-codec.js';

const codec = new TestCodec();
const req = (over: Partial<GenerateRequest> = {}): GenerateRequest => ({
  rolloutId: 'r',
  instance: { data_source: 'x', oracle: [{ content: 'first' }, { tool_calls: [{ name: 'finish', arguments: {} }] }] } as never,
  turn: 0,
  promptIds: [],
  maxTokens: 1_000,
  sampling: {} as never,
  signal: new AbortController().signal,
  ...over,
});

describe('OracleBackend', () => {
  it('replays the oracle turn of the request through the codec with one logprob per id', async () => {
    const r = await new OracleBackend({ codec }).generate(req({ turn: 1 }));
    expect(r.outputIds).toEqual(codec.encodeAssistant({ tool_calls: [{ name: 'finish', arguments: {} }] }));
    expect(r.logprobs).toHaveLength(r.outputIds.length);
    expect(r).toMatchObject({ backendId: 'oracle', weightVersion: null, finishReason: 'stop' });
  });

  it('cuts a turn longer than maxTokens and reports finishReason length', async () => {
    const r = await new OracleBackend({ codec }).generate(req({ maxTokens: 2 }));
    expect(r.outputIds).toHaveLength(2);
    expect(r.finishReason).toBe('length');
  });

  it('answers a plain-text turn once the oracle runs out', async () => {
    const r = await new OracleBackend({ codec }).generate(req({ turn: 5 }));
    expect(codec.parseAssistant(r.outputIds)).toMatchObject({ content: 'Done.', toolCalls: [] });
  });

  it('stamps the weight version it is given', async () => {
    const o = new OracleBackend({ codec, backendId: 'dry', weightVersion: 3 });
    expect(await o.generate(req())).toMatchObject({ backendId: 'dry', weightVersion: 3 });
    o.setWeightVersion('v4');
    expect((await o.generate(req())).weightVersion).toBe('v4');
  });

  it('is named by exactly one address', () => {
    expect(isOracleAddress('oracle')).toBe(true);
    expect(isOracleAddress(' oracle ')).toBe(true);
    for (const a of ['scripted', 'scripted:', 'oracle:', 'http://oracle:1', '']) expect(isOracleAddress(a)).toBe(false);
    expect(oracleSpec({ weightVersion: 2 })).toEqual({ id: 'oracle', url: ORACLE_URL, protocol: 'prorl', weightVersion: 2 });
  });
});
