import { describe, expect, it } from 'vitest';
import { ValidationError } from '../../../src/errors.js';
import { parseBackendAddress } from '../../../src/llm/backend-address.js';
import { parseAddress } from '../../../src/server/service-address.js';

describe('parseBackendAddress', () => {
  it('reads a plain http address as a ProRL backend', () => {
    expect(parseBackendAddress('http://10.0.0.2:8000')).toEqual({ id: '10.0.0.2:8000', url: 'http://10.0.0.2:8000', protocol: 'prorl' });
  });

  it('reads host:port without a scheme as a ProRL backend', () => {
    expect(parseBackendAddress('gpu1:9000').url).toBe('http://gpu1:9000');
  });

  it('takes the protocol from a prefix and the model from the query', () => {
    expect(parseBackendAddress('vllm+http://gpu1:8000?model=qwen3-8b')).toEqual({ id: 'gpu1:8000', url: 'http://gpu1:8000', protocol: 'vllm', model: 'qwen3-8b' });
  });

  it('reads an sglang address', () => {
    expect(parseBackendAddress('sglang+http://127.0.0.1:30000/').protocol).toBe('sglang');
  });

  it('refuses an unknown protocol prefix with a ValidationError', () => {
    expect(() => parseBackendAddress('tgi+http://h:1')).toThrow(ValidationError);
  });

  it('refuses a scheme other than http instead of reading it as a host name', () => {
    expect(() => parseBackendAddress('ftp://x:1')).toThrow(/invalid backend address ftp:\/\/x:1: unknown scheme/);
    expect(() => parseBackendAddress('vllm+ftp://x:1')).toThrow(ValidationError);
  });

  it('reads an address ending in /v1 (as NeMo Gym registers it) as OpenAI chat completions at that base', () => {
    expect(parseBackendAddress('http://gpu1:8000/v1')).toEqual({ id: 'gpu1:8000/v1', url: 'http://gpu1:8000/v1', protocol: 'openai' });
    expect(parseBackendAddress('gpu1:8000/v1/').protocol).toBe('openai');
  });

  it('gives openai+ without a path the base /v1', () => {
    expect(parseBackendAddress('openai+https://api.example.com')).toMatchObject({ url: 'https://api.example.com/v1', protocol: 'openai' });
  });

  it('does not double /v1 for vllm+ and sglang+ addresses that carry it', () => {
    expect(parseBackendAddress('vllm+http://h:8000/v1')).toEqual({ id: 'h:8000', url: 'http://h:8000', protocol: 'vllm' });
    expect(parseBackendAddress('sglang+http://h:30000/v1').url).toBe('http://h:30000');
  });

  it('gives two paths on one host:port two ids', () => {
    const a = parseBackendAddress('http://h:8000/a/v1');
    const b = parseBackendAddress('http://h:8000/b/v1');
    expect(a.id).not.toBe(b.id);
    expect([a.url, b.url]).toEqual(['http://h:8000/a/v1', 'http://h:8000/b/v1']);
  });

  it('reads the logprob semantics a server was started with from the query', () => {
    expect(parseBackendAddress('vllm+http://h:1?logprobs=processed').logprobSemantics).toBe('processed');
    expect(() => parseBackendAddress('vllm+http://h:1?logprobs=maybe')).toThrow(/logprobs=maybe/);
  });

  it.each(['true', '../../etc/passwd', '/etc/passwd', '', '   ', 'localhost', 'http://', 'http://user:pw@h:1', 'vllm+h:1'])('refuses %j with a ValidationError naming the address', (a) => {
    const err = (() => {
      try {
        parseBackendAddress(a);
      } catch (e) {
        return e;
      }
      return null;
    })();
    expect(err).toBeInstanceOf(ValidationError);
    expect((err as ValidationError).message).toMatch(/invalid backend address/);
    expect((err as ValidationError).issues?.[0]?.path).toBe('address');
  });
});

describe('parseAddress (service)', () => {
  it('takes the built-in oracle backend by its one name', () => {
    expect(parseAddress('oracle')).toMatchObject({ id: 'oracle', url: 'oracle:' });
    expect(() => parseAddress('scripted')).toThrow(ValidationError);
  });

  it('refuses "true" and a file path before they reach the pool', () => {
    expect(() => parseAddress('true')).toThrow(ValidationError);
    expect(() => parseAddress('../../etc/passwd')).toThrow(ValidationError);
  });
});
