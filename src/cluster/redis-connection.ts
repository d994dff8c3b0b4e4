import { readFileSync } from 'node:fs';
import { Redis } from 'ioredis';
import { ValidationError } from '../errors.js';

/**
 * An ioredis connection as the cluster uses them: `maxRetriesPerRequest: null` so a command
 * issued while Redis restarts waits for the reconnect instead of failing (BullMQ requires it for
 * workers; for us it means a submit during a Redis restart is delayed, not lost), and a capped
 * reconnect back-off.
 */
export function redisConnection(url: string): Redis {
  return new Redis(url, {
    maxRetriesPerRequest: null,
    enableReadyCheck: true,
    retryStrategy: (times) => Math.min(50 * times, 1000),
  });
}

/** Where {@link withRedisPassword} looks for a password kept out of the URL (and so out of argv). */
export interface RedisSecretSources {
  /** A file holding the password (`--redis-password-file`); one trailing newline is dropped. */
  file?: string | undefined;
  /** The environment: `REDIS_PASSWORD`, else the file named by `REDIS_PASSWORD_FILE`. */
  env?: NodeJS.ProcessEnv | undefined;
}

/**
 * The cluster's Redis URL with its password, taken — when the URL carries none — from
 * `sources.file`, else `REDIS_PASSWORD`, else the file `REDIS_PASSWORD_FILE` names (issue #28
 * §5.8: a password in `--redis redis://:secret@host` is visible to every user in `ps`). A password
 * in the URL itself wins. The answer is for connecting only: never print it (the CLI's banner redacts credentials).
 * @throws ValidationError naming the file when it cannot be read or is empty.
 */
export function withRedisPassword(url: string, sources: RedisSecretSources = {}): string {
  const env = sources.env ?? {};
  let password: string | null = null;
  const fromFile = (file: string, field: string): string => {
    let text: string;
    try {
      text = readFileSync(file, 'utf8').replace(/\r?\n$/, '');
    } catch (err) {
      throw new ValidationError(`cannot read the Redis password file ${file}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`, [{ path: field, message: 'unreadable' }]);
    }
    if (!text) throw new ValidationError(`the Redis password file ${file} is empty`, [{ path: field, message: 'empty' }]);
    return text;
  };
  if (sources.file) password = fromFile(sources.file, 'redis-password-file');
  else if (env['REDIS_PASSWORD']) password = env['REDIS_PASSWORD'];
  else if (env['REDIS_PASSWORD_FILE']) password = fromFile(env['REDIS_PASSWORD_FILE'], 'REDIS_PASSWORD_FILE');
  if (password === null) return url;
  let u: URL;
  try {
    u = new URL(url);
  } catch {
    return url; // the cluster options refuse a malformed URL, naming the field
  }
  if (u.password) return url;
  u.password = password; // percent-encoded by URL; ioredis decodes it
  return u.toString();
}
