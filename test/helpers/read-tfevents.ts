import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';

/** The event file as an independent reader (python3, TFRecord + protobuf by hand) sees it. */
export interface ReadEvent {
  step: number;
  wall_time: number;
  file_version?: string;
  scalars: Record<string, number>;
}

const reader = fileURLToPath(new URL('../fixtures/read_tfevents.py', import.meta.url));

/** Reads an event file with test/fixtures/read_tfevents.py (which checks every CRC). */
export function readEvents(path: string): Promise<ReadEvent[]> {
  return new Promise((res, rej) => {
    execFile('python3', [reader, path], (err, stdout, stderr) => (err ? rej(new Error(`${err.message}\n${stderr}`)) : res(JSON.parse(stdout) as ReadEvent[])));
  });
}

