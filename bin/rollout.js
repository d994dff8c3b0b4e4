#!/usr/bin/env node
// The `rollout` command. In a clone the TypeScript sources run through tsx, so `npm ci` needs no
// build step and an edit takes effect at once. An installed package ships the build instead
// (dist/, made by `npm run build` on `npm pack`), and runs it under plain Node: tsx is a dev
// dependency, so consumers never install it.
import { existsSync } from 'node:fs';

const source = new URL('../src/cli/main.ts', import.meta.url);
let main;
if (existsSync(source)) {
  // tsx is a dev dependency: a clone has it after `npm ci`; the package never needs it.
  const tsx = await import('tsx/esm/api').catch(() => null);
  if (!tsx) {
    process.stderr.write('rollout: running from the sources needs tsx (a dev dependency): run `npm ci` in this clone, or `npm run build` and run dist/\n');
    process.exit(1);
  }
  tsx.register();
  ({ main } = await import(source.href));
} else {
  ({ main } = await import(new URL('../dist/src/cli/main.js', import.meta.url).href));
}
process.exitCode = await main(process.argv.slice(2));
