import { Redis } from 'ioredis';

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
