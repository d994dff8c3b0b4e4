import { OracleBackend } from '../../../src/llm/oracle-backend.js';
import type { GenerateRequest, GenerateResult } from '../../../src/llm/llm-client.js';
import type { OracleTurn } from '../../../src/protocol/messages.js';
import type { Trajectory } from '../../../src/protocol/trajectory.js';
import type { ChatCodec } from '../../../src/llm/chat-codec.js';

/**
 * The oracle backend with two test hooks for tree rollouts: a script per trajectory id (a
 * branch's is `<parent's>.<turn>.<i>`, so branches can act differently), and gates that hold
 * the call of one (trajectory id, turn) until the test opens them.
 */
export class TreeOracle extends OracleBackend {
  readonly scripts = new Map<string, OracleTurn[]>();
  private readonly gates = new Map<string, { promise: Promise<void>; open: () => void }>();
  /** `traj:turn` of calls held at a gate now. */
  readonly waiting = new Set<string>();
  calls = 0;

  constructor(codec: ChatCodec) {
    super({ codec });
  }

  /** Holds the call of trajectory `traj` at `turn` until {@link open}. */
  hold(traj: string, turn: number): void {
    let open!: () => void;
    const promise = new Promise<void>((r) => (open = r));
    this.gates.set(`${traj}:${turn}`, { promise, open });
  }

  open(traj: string, turn: number): void {
    this.gates.get(`${traj}:${turn}`)?.open();
  }

  override async generate(req: GenerateRequest): Promise<GenerateResult> {
    this.calls++;
    const key = `${req.instance.trajectory_id ?? ''}:${req.turn}`;
    const g = this.gates.get(key);
    if (g) {
      this.waiting.add(key);
      await Promise.race([g.promise, new Promise((_, reject) => req.signal.addEventListener('abort', () => reject(new Error('aborted')), { once: true }))]).finally(() => this.waiting.delete(key));
    }
    return this.replay(req);
  }

  protected override replay(req: GenerateRequest): GenerateResult {
    const script = this.scripts.get(req.instance.trajectory_id ?? '');
    return super.replay(script ? { ...req, instance: { ...req.instance, oracle: script } } : req);
  }
}

export const bash = (command: string): OracleTurn => ({ content: command, tool_calls: [{ name: 'execute_bash', arguments: { command } }] });
export const finish: OracleTurn = { tool_calls: [{ name: 'finish', arguments: { message: 'done' } }] };

/**
 * Checks a full trajectory is token-exact on its own: each turn's prompt is the head of the
 * token list, its sampled ids follow it, and the mask is 1 exactly on sampled ids with their
 * logprobs. Returns a description of the first fault, or null.
 */
export function tokenFault(t: Trajectory): string | null {
  if (t.lossMask.length !== t.tokens.length || t.logprobs.length !== t.tokens.length) return 'lists not aligned';
  const sampled = new Array<number>(t.tokens.length).fill(0);
  for (const [k, turn] of t.turns.entries()) {
    const p = turn.promptIds.length;
    for (let i = 0; i < p; i++) if (turn.promptIds[i] !== t.tokens[i]) return `turn ${k}: prompt differs at ${i}`;
    for (let j = 0; j < turn.outputIds.length; j++) {
      if (t.tokens[p + j] !== turn.outputIds[j]) return `turn ${k}: output differs at ${j}`;
      if (t.logprobs[p + j] !== turn.logprobs[j]) return `turn ${k}: logprob differs at ${j}`;
      sampled[p + j] = 1;
    }
  }
  for (let i = 0; i < t.tokens.length; i++) if (t.lossMask[i] !== sampled[i]) return `mask differs at ${i}`;
  return null;
}
