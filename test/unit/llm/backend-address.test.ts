import { describe, expect, it } from 'vitest';
import { ValidationError } from '../../../src/errors.js';
import { parseBackendAddress } from '../../../src/llm/backend-address.js';

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
});
