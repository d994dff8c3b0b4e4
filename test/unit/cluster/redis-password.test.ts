import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import { formatBanner, redactUrlCredentials } from '../../../src/cli/banner.js';
import { withRedisPassword } from '../../../src/cluster/redis-connection.js';

const dir = mkdtempSync(join(tmpdir(), 'redis-pw-unit-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe('the Redis password out of argv and banners (#28 §5.8)', () => {
  it.each([
    ['redis://:s3cret@10.0.0.1:6379', 'redis://:***@10.0.0.1:6379'],
    ['redis://default:s3cret@h:6379/2', 'redis://default:***@h:6379/2'],
    ['rediss://s3cret@h', 'rediss://***@h'],
    ['gateway on redis://:a%40b@h:1 and http://u:p@x/y', 'gateway on redis://:***@h:1 and http://u:***@x/y'],
    ['redis://h:6379', 'redis://h:6379'],
    ['user@example.com is not a URL', 'user@example.com is not a URL'],
  ])('redacts %s', (text, want) => {
    expect(redactUrlCredentials(text)).toBe(want);
  });

  it('redacts every banner value', () => {
    expect(formatBanner([['cluster', 'gateway on redis://:s3cret@h:6379']])).toBe('  cluster  gateway on redis://:***@h:6379\n');
  });

  it('takes the password from the file, then REDIS_PASSWORD, then REDIS_PASSWORD_FILE; one in the URL wins', () => {
    const file = join(dir, 'pw');
    writeFileSync(file, 'from:file@\n');
    const other = join(dir, 'pw2');
    writeFileSync(other, 'from-env-file');
    expect(withRedisPassword('redis://h:6379', { file, env: { REDIS_PASSWORD: 'env' } })).toBe('redis://:from%3Afile%40@h:6379');
    expect(withRedisPassword('redis://h:6379', { env: { REDIS_PASSWORD: 'env', REDIS_PASSWORD_FILE: other } })).toBe('redis://:env@h:6379');
    expect(withRedisPassword('redis://h:6379', { env: { REDIS_PASSWORD_FILE: other } })).toBe('redis://:from-env-file@h:6379');
    expect(withRedisPassword('redis://:inurl@h:6379', { env: { REDIS_PASSWORD: 'env' } })).toBe('redis://:inurl@h:6379');
    expect(withRedisPassword('redis://h:6379', { env: {} })).toBe('redis://h:6379');
  });

  it('refuses an unreadable or empty password file, naming it', () => {
    expect(() => withRedisPassword('redis://h', { file: join(dir, 'missing') })).toThrow(/cannot read the Redis password file .*missing: ENOENT/);
    const empty = join(dir, 'empty');
    writeFileSync(empty, '\n');
    expect(() => withRedisPassword('redis://h', { file: empty })).toThrow(/is empty/);
  });
});
