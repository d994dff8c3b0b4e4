import { mkdtemp, rm, writeFile, mkdir } from 'node:fs/promises';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { fromPromise, setup } from 'xstate';
import { builtinHandlers } from '../../../src/handlers/builtin.js';
import { createVisualizerHandler, dataSourceFamilies, machineGraph, rolloutMachineGraph, serveVisualizer } from '../../../src/server/visualizer-assets.js';

const tiny = setup({ actors: { work: fromPromise(async () => 1) }, guards: { ok: () => true } }).createMachine({
  id: 'tiny',
  initial: 'idle',
  on: { STOP: '.stopped' },
  states: {
    idle: { on: { GO: { target: 'busy', guard: 'ok' } }, after: { 500: 'stopped' } },
    busy: {
      initial: 'a',
      invoke: { src: 'work', onDone: 'finished', onError: 'stopped' },
      states: { a: { on: { NEXT: 'b' } }, b: { always: '#tiny.finished' } },
    },
    finished: { type: 'final' },
    stopped: { type: 'final' },
  },
});

describe('machineGraph', () => {
  it('lists every state, nested ones with dotted ids and their parent', () => {
    const g = machineGraph(tiny);
    expect(g.initial).toBe('idle');
    expect(g.states.map((s) => [s.id, s.parent, s.type])).toEqual([
      ['idle', null, 'atomic'],
      ['busy', null, 'compound'],
      ['busy.a', 'busy', 'atomic'],
      ['busy.b', 'busy', 'atomic'],
      ['finished', null, 'final'],
      ['stopped', null, 'final'],
    ]);
    expect(g.states.find((s) => s.id === 'busy')).toMatchObject({ initial: 'busy.a', invokes: ['work'] });
  });

  it('labels event, delayed, invoke done/error, eventless and root transitions', () => {
    const edges = machineGraph(tiny).transitions.map((t) => `${t.source}>${t.target}:${t.label}${t.guard ? `?${t.guard}` : ''}`);
    expect(edges).toEqual([
      '>stopped:STOP',
      'idle>busy:GO?ok',
      'idle>stopped:after 500',
      'busy>finished:done: work',
      'busy>stopped:error: work',
      'busy.a>busy.b:NEXT',
      'busy.b>finished:always',
    ]);
  });

  it('refuses something that is not a machine', () => {
    expect(() => machineGraph({ id: 'x', root: undefined })).toThrow(TypeError);
  });

  it('derives the rollout machine graph from machines/rollout.machine.ts with every RolloutState', async () => {
    const g = machineGraph();
    expect(await rolloutMachineGraph()).toEqual(g);
    const keys = new Set(g.states.map((s) => s.key));
    for (const s of ['queued', 'initializing', 'waitingRun', 'llmCalling', 'acting', 'waitingEval', 'evaluating', 'done', 'failed', 'timedOut', 'cancelled']) {
      expect(keys.has(s)).toBe(true);
    }
    expect(g.id).toBe('rollout');
  });
});

describe('createVisualizerHandler', () => {
  let dir: string;
  let server: Server;
  let base: string;

  beforeAll(async () => {
    dir = await mkdtemp(join(tmpdir(), 'viz-assets-'));
    await writeFile(join(dir, 'index.html'), '<!doctype html><title>viz</title>');
    await writeFile(join(dir, 'app.js'), 'export {};');
    await writeFile(join(dir, 'style.css'), 'body{}');
    await mkdir(join(dir, 'sub'));
    await writeFile(join(dir, 'sub', 'x.svg'), '<svg/>');
    await writeFile(join(tmpdir(), 'viz-outside.txt'), 'secret').catch(() => {});
    const handler = createVisualizerHandler({ root: dir, graph: async () => machineGraph(tiny) });
    server = createServer((req, res) => {
      if (!handler(req, res)) res.writeHead(418).end('not mine');
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
    base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  afterAll(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    await rm(dir, { recursive: true, force: true });
    await rm(join(tmpdir(), 'viz-outside.txt'), { force: true });
  });

  it('serves index.html at /visualizer and /visualizer/', async () => {
    for (const path of ['/visualizer', '/visualizer/']) {
      const res = await fetch(base + path);
      expect(res.status).toBe(200);
      expect(res.headers.get('content-type')).toBe('text/html; charset=utf-8');
      expect(await res.text()).toContain('<title>viz</title>');
    }
  });

  it('serves assets with their content types', async () => {
    const types = await Promise.all(['app.js', 'style.css', 'sub/x.svg'].map(async (f) => (await fetch(`${base}/visualizer/${f}`)).headers.get('content-type')));
    expect(types).toEqual(['text/javascript; charset=utf-8', 'text/css; charset=utf-8', 'image/svg+xml']);
  });

  it('serves the machine graph at /visualizer/graph.json', async () => {
    const res = await fetch(`${base}/visualizer/graph.json`);
    expect(res.headers.get('content-type')).toBe('application/json; charset=utf-8');
    expect(await res.json()).toEqual(JSON.parse(JSON.stringify(machineGraph(tiny))));
  });

  it('answers 404 for a missing file and for paths escaping the folder', async () => {
    expect((await fetch(`${base}/visualizer/nope.js`)).status).toBe(404);
    // `%2e%2e` normalizes to `..` while parsing: the path leaves /visualizer and is not ours.
    const dotted = await fetch(`${base}/visualizer/%2e%2e/%2e%2e/viz-outside.txt`);
    expect([dotted.status, await dotted.text()]).toEqual([418, 'not mine']);
    expect((await fetch(`${base}/visualizer/..%2f..%2fviz-outside.txt`)).status).toBe(404);
    expect((await fetch(`${base}/visualizer/sub%2f..%2f..%2fviz-outside.txt`)).status).toBe(404);
    expect((await fetch(`${base}/visualizer/sub`)).status).toBe(404);
  });

  it('answers 405 to methods other than GET and HEAD', async () => {
    const res = await fetch(`${base}/visualizer/app.js`, { method: 'POST' });
    expect(res.status).toBe(405);
    expect(res.headers.get('allow')).toBe('GET, HEAD');
  });

  it('returns false for paths that are not under /visualizer', async () => {
    for (const path of ['/', '/v1/rollouts', '/visualizerx']) expect((await fetch(base + path)).status).toBe(418);
  });
});

describe('serveVisualizer', () => {
  it("serves the repository's visualizer page", async () => {
    const server = createServer((req, res) => {
      if (!serveVisualizer(req, res)) res.writeHead(418).end();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
    try {
      const base = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
      const html = await (await fetch(`${base}/visualizer`)).text();
      expect(html).toContain('<script type="module" src="/visualizer/app.js">');
      expect((await fetch(`${base}/visualizer/app.js`)).status).toBe(200);
    } finally {
      server.closeAllConnections();
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  });
});

describe('/visualizer/info.json (#30)', () => {
  const serve = async (handler: ReturnType<typeof createVisualizerHandler>, fn: (base: string) => Promise<void>) => {
    const server = createServer((req, res) => {
      if (!handler(req, res)) res.writeHead(418).end();
    });
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
    try {
      await fn(`http://127.0.0.1:${(server.address() as AddressInfo).port}`);
    } finally {
      await new Promise<void>((resolve) => server.close(() => resolve()));
    }
  };

  it('says live by default, with the data-source aliases as rollout run merges them', async () => {
    await serve(createVisualizerHandler(), async (base) => {
      const res = await fetch(`${base}/visualizer/info.json`);
      expect(res.headers.get('content-type')).toBe('application/json; charset=utf-8');
      const info = (await res.json()) as { mode: string; dataSourceFamilies: Record<string, string> };
      expect(info.mode).toBe('live');
      // rollout run's familyOf: the built-in handler whose name or alias it is.
      const familyOf = (ds: string) => builtinHandlers.find((h) => h.name === ds || h.aliases?.includes(ds))?.name ?? ds;
      const aliases = builtinHandlers.flatMap((h) => h.aliases ?? []);
      expect(aliases.length).toBeGreaterThan(0);
      for (const a of aliases) expect(info.dataSourceFamilies[a] ?? a).toBe(familyOf(a));
      expect(info.dataSourceFamilies).toMatchObject({ deepscaler: 'math', codecontests: 'code', swebench: 'swe' });
    });
  });

  it('says replay and names the run when given one', async () => {
    await serve(createVisualizerHandler({ info: { mode: 'replay', run: { name: '2026-12-01T18-00-00', rollouts: 6, events: 120 } } }), async (base) => {
      const info = (await (await fetch(`${base}/visualizer/info.json`)).json()) as { mode: string; run: unknown; dataSourceFamilies: Record<string, string> };
      expect(info).toMatchObject({ mode: 'replay', run: { name: '2026-12-01T18-00-00', rollouts: 6, events: 120 } });
      expect(Object.keys(info.dataSourceFamilies).length).toBeGreaterThan(0);
      expect(dataSourceFamilies([{ name: 'a', aliases: ['b'] } as never, { name: 'b' } as never])).toEqual({ b: 'a' });
    });
  });
});
