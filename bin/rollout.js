#!/usr/bin/env node
// The `rollout` command. In a clone the TypeScript sources run through tsx, so `npm ci` needs no
// build step and an edit takes effect at once. An installed package ships the build instead
// (dist/, made by `npm run build` on `npm pack`), and runs it under plain Node.
import { existsSync } from 'node:fs';

const source = new URL('../src/cli/main.ts', import.meta.url);
let main;
if (existsSync(source)) {
  const { register } = await import('tsx/esm/api');
  register();
  ({ main } = await import(source.href));
} else {
  ({ main } = await import(new URL('../dist/src/cli/main.js', import.meta.url).href));
}
process.exitCode = await main(process.argv.slice(2));
