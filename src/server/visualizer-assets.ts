import { createReadStream } from 'node:fs';
import { stat } from 'node:fs/promises';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { extname, resolve, sep } from 'node:path';
import { rolloutMachine } from '../../machines/rollout.machine.js';
import { builtinHandlers, familyOf } from '../handlers/builtin.js';
import type { AgentHandler } from '../proxy/agent-contract.js';
import { packagePath } from '../package-root.js';

/** One state of a machine, flattened out of the state tree. */
export interface GraphState {
  /** Dotted path from the root, e.g. `acting` or `acting.exec`; unique. */
  id: string;
  /** The state's own key, e.g. `exec`. */
  key: string;
  /** The parent's `id`, or null for a top-level state. */
  parent: string | null;
  /** Nesting level: 1 for top-level states. */
  depth: number;
  type: 'atomic' | 'compound' | 'parallel' | 'final' | 'history';
  /** The initial child's `id`, for compound states. */
  initial: string | null;
  /** Names of the actors invoked while in this state. */
  invokes: string[];
  /** Tags and `description` from the definition, when present. */
  tags: string[];
  description: string | null;
}

/** One transition; one entry per (source, event, target) triple. */
export interface GraphTransition {
  /** The source state's `id`; '' for a transition on the machine root (taken from any state). */
  source: string;
  /** Null for a targetless (self, no re-entry) transition. */
  target: string | null;
  /** The raw event type, e.g. `xstate.done.actor.llm` or `CANCEL`. */
  event: string;
  /** A short human label: `done: llm`, `error: sandbox`, `after 500`, `always`, `CANCEL`. */
  label: string;
  /** The guard's name, when the transition is guarded by a named guard. */
  guard: string | null;
}

/** A machine's states and transitions, as served at `/visualizer/graph.json`. */
export interface MachineGraph {
  id: string;
  /** The `id` of the root's initial state. */
  initial: string | null;
  states: GraphState[];
  transitions: GraphTransition[];
}

/** The part of an XState v5 `StateNode` this module reads; typed loosely so any machine fits. */
interface StateNodeLike {
  key: string;
  type: GraphState['type'];
  path: string[];
  states: Record<string, StateNodeLike>;
  initial?: { target?: ReadonlyArray<StateNodeLike> } | undefined;
  transitions: Map<string, ReadonlyArray<TransitionLike>>;
  always?: ReadonlyArray<TransitionLike> | undefined;
  invoke?: ReadonlyArray<{ src: unknown; id?: string }> | undefined;
  tags?: ReadonlyArray<string> | undefined;
  description?: string | undefined;
}
interface TransitionLike {
  eventType: string;
  target?: ReadonlyArray<StateNodeLike> | undefined;
  guard?: unknown;
}
/** The part of an XState v5 `StateMachine` this module reads. */
export interface MachineLike {
  id: string;
  root: unknown;
}

function pathId(node: StateNodeLike): string {
  return node.path.join('.');
}

function labelOf(eventType: string, invokeNames: ReadonlyMap<string, string>): string {
  // Invokes without an explicit id get generated ones (`0.machine.state`); show the actor's name.
  const done = /^xstate\.done\.actor\.(.+)$/.exec(eventType);
  if (done) return `done: ${invokeNames.get(done[1]!) ?? done[1]}`;
  const error = /^xstate\.error\.actor\.(.+)$/.exec(eventType);
  if (error) return `error: ${invokeNames.get(error[1]!) ?? error[1]}`;
  // XState encodes `after` as `xstate.after.<delay>.<state id>`.
  const after = /^xstate\.after\.([^.]+)\./.exec(eventType);
  if (after) return `after ${after[1]}`;
  const doneState = /^xstate\.done\.state\.(.+)$/.exec(eventType);
  if (doneState) return `done: ${doneState[1]}`;
  return eventType === '' ? 'always' : eventType;
}

function guardName(guard: unknown): string | null {
  if (guard === undefined || guard === null) return null;
  if (typeof guard === 'string') return guard;
  if (typeof guard === 'function') return guard.name || 'guard';
  if (typeof guard === 'object' && 'type' in guard && typeof (guard as { type: unknown }).type === 'string') {
    return (guard as { type: string }).type;
  }
  return 'guard';
}

function invokeName(src: unknown, id: string | undefined): string {
  if (typeof src === 'string') return src;
  return id ?? 'actor';
}

/**
 * Walks an XState v5 machine's state tree (`machine.root`) — by default the runtime's rollout
 * machine (machines/rollout.machine.ts) — and returns every state and
 * transition as plain JSON, so the page draws the machine that actually runs rather than a copy.
 * Delayed (`after`), eventless (`always`), invoke `onDone` / `onError` and ordinary event
 * transitions are all included; nested states are flattened with dotted ids. Pure: the same
 * machine gives the same graph, in definition order. Throws TypeError when `machine` is not a
 * machine (no `root` state node).
 */
export function machineGraph(machine: MachineLike = rolloutMachine): MachineGraph {
  const root = machine.root as StateNodeLike | undefined;
  if (root === undefined || root === null || typeof root !== 'object' || !('states' in root)) {
    throw new TypeError('machineGraph: not an XState machine (no root state node)');
  }
  const states: GraphState[] = [];
  const transitions: GraphTransition[] = [];

  const addAll = (node: StateNodeLike, id: string): void => {
    const invokeNames = new Map<string, string>();
    for (const inv of node.invoke ?? []) if (inv.id !== undefined) invokeNames.set(inv.id, invokeName(inv.src, inv.id));
    const add = (t: TransitionLike): void => {
      const targets = t.target ?? [];
      const base = { source: id, event: t.eventType, label: labelOf(t.eventType, invokeNames), guard: guardName(t.guard) };
      if (targets.length === 0) transitions.push({ ...base, target: null });
      for (const target of targets) transitions.push({ ...base, target: pathId(target) });
    };
    for (const list of node.transitions.values()) for (const t of list) add(t);
    for (const t of node.always ?? []) add({ ...t, eventType: '' });
  };

  const visit = (node: StateNodeLike, parent: string | null): void => {
    const id = pathId(node);
    const initialTarget = node.initial?.target?.[0];
    states.push({
      id,
      key: node.key,
      parent,
      depth: node.path.length,
      type: node.type,
      initial: initialTarget ? pathId(initialTarget) : null,
      invokes: (node.invoke ?? []).map((inv) => invokeName(inv.src, inv.id)),
      tags: [...(node.tags ?? [])],
      description: node.description ?? null,
    });
    addAll(node, id);
    for (const child of Object.values(node.states)) visit(child, id);
  };
  addAll(root, '');
  for (const child of Object.values(root.states)) visit(child, null);

  const rootInitial = root.initial?.target?.[0];
  return { id: machine.id, initial: rootInitial ? pathId(rootInitial) : null, states, transitions };
}

let rolloutGraph: MachineGraph | null = null;

/**
 * The graph of the runtime's rollout machine, computed once; a promise so a handler can be
 * given any graph source. Never rejects for the built-in machine.
 */
export function rolloutMachineGraph(): Promise<MachineGraph> {
  rolloutGraph ??= machineGraph(rolloutMachine);
  return Promise.resolve(rolloutGraph);
}

const CONTENT_TYPES: Record<string, string> = {
  '.html': 'text/html; charset=utf-8',
  '.js': 'text/javascript; charset=utf-8',
  '.mjs': 'text/javascript; charset=utf-8',
  '.css': 'text/css; charset=utf-8',
  '.json': 'application/json; charset=utf-8',
  '.svg': 'image/svg+xml',
  '.png': 'image/png',
  '.ico': 'image/x-icon',
  '.txt': 'text/plain; charset=utf-8',
  '.map': 'application/json; charset=utf-8',
};

/**
 * data_source alias -> the family it is counted under, as `rollout run`'s summary merges them
 * ({@link familyOf}: the built-in handler whose name or alias it is; the first such handler wins).
 * Served to the page in `/visualizer/info.json` so its per-source figures match the CLI's
 * without a copy of the table in JS. Only aliases are listed: anything else is its own family.
 */
export function dataSourceFamilies(handlers: readonly AgentHandler[] = builtinHandlers): Record<string, string> {
  const out: Record<string, string> = {};
  for (const h of handlers) {
    for (const a of h.aliases ?? []) {
      const family = familyOf(a, handlers);
      if (family !== a) out[a] = family;
    }
  }
  return out;
}

/** What the page is showing, served at `/visualizer/info.json`. */
export interface VisualizerInfo {
  /** `live`: a running service (`serve`, `run --visualize`); `replay`: a finished run (`rollout view`). */
  mode: 'live' | 'replay';
  /** The replayed run: its directory's name (not its path: the page's files are served without the token) and what was read. */
  run?: { name: string; rollouts: number; events: number };
  /** See {@link dataSourceFamilies}. */
  dataSourceFamilies: Record<string, string>;
}

/** Options of {@link createVisualizerHandler}. */
export interface VisualizerHandlerOptions {
  /** What `/visualizer/info.json` says: default a live service with the built-in handlers' aliases. */
  info?: Partial<VisualizerInfo>;
  /** The folder holding index.html and its assets. Default: the repository's `visualizer/`. */
  root?: string;
  /** The graph served at `/visualizer/graph.json`. Default: {@link rolloutMachineGraph}. */
  graph?: () => Promise<MachineGraph>;
}

/** Handles a request if it is under `/visualizer`; returns false, touching nothing, otherwise. */
export type VisualizerHandler = (req: IncomingMessage, res: ServerResponse) => boolean;

/**
 * Builds a request handler for the visualizer page: `GET /visualizer` and `/visualizer/` serve
 * index.html, `/visualizer/graph.json` the machine graph, `/visualizer/info.json` what the page
 * shows ({@link VisualizerInfo}: live or a replay, the data-source aliases), `/visualizer/<file>` a file of the
 * folder with its content type. Anything outside the folder (`..`, encoded or not) is a 404;
 * a method other than GET / HEAD is a 405. Never throws; I/O errors become a 404 or 500.
 */
export function createVisualizerHandler(options: VisualizerHandlerOptions = {}): VisualizerHandler {
  const root = resolve(options.root ?? packagePath('visualizer'));
  const graph = options.graph ?? rolloutMachineGraph;
  const info: VisualizerInfo = { mode: 'live', dataSourceFamilies: dataSourceFamilies(), ...options.info };
  const infoBody = JSON.stringify(info);

  return (req, res) => {
    const url = new URL(req.url ?? '/', 'http://localhost');
    const path = url.pathname;
    if (path !== '/visualizer' && !path.startsWith('/visualizer/')) return false;
    if (req.method !== 'GET' && req.method !== 'HEAD') {
      res.writeHead(405, { allow: 'GET, HEAD', 'content-type': 'text/plain; charset=utf-8' }).end('method not allowed\n');
      return true;
    }
    const head = req.method === 'HEAD';
    const rest = path === '/visualizer' || path === '/visualizer/' ? 'index.html' : path.slice('/visualizer/'.length);

    if (rest === 'info.json') {
      res.writeHead(200, { 'content-type': CONTENT_TYPES['.json']!, 'cache-control': 'no-cache', 'content-length': Buffer.byteLength(infoBody) });
      res.end(head ? undefined : infoBody);
      return true;
    }
    if (rest === 'graph.json') {
      graph().then(
        (g) => {
          const body = JSON.stringify(g);
          res.writeHead(200, { 'content-type': CONTENT_TYPES['.json']!, 'cache-control': 'no-cache', 'content-length': Buffer.byteLength(body) });
          res.end(head ? undefined : body);
        },
        (err: unknown) => {
          const body = JSON.stringify({ error: { name: 'GraphUnavailable', message: err instanceof Error ? err.message : String(err) } });
          res.writeHead(503, { 'content-type': CONTENT_TYPES['.json']! }).end(body);
        },
      );
      return true;
    }

    let decoded: string;
    try {
      decoded = decodeURIComponent(rest);
    } catch {
      notFound(res);
      return true;
    }
    const file = resolve(root, decoded);
    if (!file.startsWith(root + sep) || decoded.includes('\0')) {
      notFound(res);
      return true;
    }
    stat(file).then(
      (st) => {
        if (!st.isFile()) return notFound(res);
        res.writeHead(200, {
          'content-type': CONTENT_TYPES[extname(file).toLowerCase()] ?? 'application/octet-stream',
          'content-length': st.size,
          // The page is small and changes with the checkout; revalidating costs nothing here.
          'cache-control': 'no-cache',
          'x-content-type-options': 'nosniff',
        });
        if (head) return void res.end();
        const stream = createReadStream(file);
        stream.on('error', () => res.destroy());
        stream.pipe(res);
      },
      () => notFound(res),
    );
    return true;
  };
}

function notFound(res: ServerResponse): void {
  res.writeHead(404, { 'content-type': 'text/plain; charset=utf-8' }).end('not found\n');
}

let defaultHandler: VisualizerHandler | null = null;

/**
 * Serves the visualizer from the repository's `visualizer/` folder and the rollout machine's
 * graph at `/visualizer/graph.json`. Returns true when the request was under `/visualizer`
 * (and is being answered), false otherwise so the caller routes it on. Never throws.
 */
export function serveVisualizer(req: IncomingMessage, res: ServerResponse): boolean {
  defaultHandler ??= createVisualizerHandler();
  return defaultHandler(req, res);
}
