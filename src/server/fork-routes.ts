import { ForkError, SandboxError } from '../errors.js';
import { ForkRequestSchema } from '../protocol/fork.js';
import type { RolloutSummary } from '../runtime/runtime-api.js';
import { branchPoints, type TreeNode } from '../runtime/rollout-tree.js';
import { HttpError, parseOr400 } from './http-error.js';
import { redactHostPaths } from './redact.js';
import type { Route } from './router.js';
import type { ServiceContext } from './service-context.js';
import type { ServiceRuntime } from './service-runtime.js';

function running(service: ServiceContext): ServiceRuntime {
  const rt = service.runtime;
  if (!rt) throw new HttpError(503, 'STOPPED', 'the service is stopped; POST /start first');
  return rt;
}

/** HTTP status of each refusal of a fork. */
const FORK_STATUS: Record<string, number> = { FORK_NOT_FOUND: 404, FORK_ENDED: 409, FORK_UNSUPPORTED: 409, FORK_BUSY: 409 };

/**
 * A fork's error as an answer: a refusal by its code (404 / 409), a bad field 400, past capacity
 * 429; the sandbox's failure to freeze or snapshot is an infra error — 503 with its code
 * (`FREEZE_UNAVAILABLE`, `FORK_FAILED`), the rollout untouched and still running.
 */
function forkHttpError(err: unknown): unknown {
  if (err instanceof ForkError) return new HttpError(FORK_STATUS[err.code] ?? 409, err.code, err.message);
  if (err instanceof SandboxError) return new HttpError(503, err.code, `infra-error: ${redactHostPaths(err.message)} (the rollout goes on unforked)`);
  // ValidationError 400, QueueFullError 429, the rest as any route's error.
  return err;
}

/** The nodes of a group's tree from its rollouts' summaries (live ones included). */
function nodesOf(list: readonly RolloutSummary[]): { roots: string[]; nodes: (TreeNode & { state: RolloutSummary['state'] })[] } {
  const byId = new Map(list.map((s) => [s.id, { id: s.id, parentId: s.parentId ?? null, branchTurn: s.branchTurn ?? null, turns: s.turn, state: s.state, reward: s.result?.reward ?? null, outcome: s.result?.outcome ?? null, finish: s.result?.finish ?? null, children: [] as string[] }]));
  const roots: string[] = [];
  for (const n of byId.values()) {
    const p = n.parentId === null ? undefined : byId.get(n.parentId);
    if (p) p.children.push(n.id);
    else roots.push(n.id);
  }
  const nodes = [];
  const queue = [...roots];
  for (let i = 0; i < queue.length; i++) {
    const n = byId.get(queue[i]!)!;
    nodes.push(n);
    queue.push(...n.children);
  }
  return { roots, nodes: nodes as never };
}

/**
 * Tree rollouts (#26) on the native API: fork a live rollout, read a group as a tree, read a
 * shared prefix.
 */
export function forkRoutes(service: ServiceContext): Route[] {
  return [
    {
      method: 'POST',
      path: '/v1/rollouts/:id/fork',
      handler: async (r) => {
        const body = parseOr400(ForkRequestSchema, await r.body());
        const rt = running(service);
        if (!rt.fork) throw new HttpError(501, 'NOT_IMPLEMENTED', 'this runtime cannot fork rollouts (a cluster gateway: fork on the worker)');
        const id = r.params.id!;
        try {
          const f = await rt.fork(id, { n: body.n, atTurn: body.atTurn ?? body.at_turn, continueParent: body.continueParent ?? body.continue_parent });
          // Observed, not dropped: branch results are read through the results endpoint and events.
          for (const b of f.rollouts) b.result.catch(() => undefined);
          return { status: 202, body: { parent_id: f.parentId, rollout_ids: f.rolloutIds, branch_turn: f.branchTurn, prefix_id: f.prefixId, lost: f.lost, frozen_ms: f.frozenMs } };
        } catch (err) {
          throw forkHttpError(err);
        }
      },
    },
    {
      method: 'GET',
      path: '/v1/groups/:id/tree',
      handler: (r) => {
        const rt = running(service);
        const list = rt.list({ groupId: r.params.id! });
        if (list.length === 0) throw new HttpError(404, 'NOT_FOUND', `no group ${r.params.id!.slice(0, 200)}`);
        const { roots, nodes } = nodesOf(list);
        return {
          status: 200,
          body: {
            group_id: r.params.id,
            complete: list.every((s) => s.result !== null),
            roots,
            nodes: nodes.map((n) => ({ id: n.id, parent_id: n.parentId, branch_turn: n.branchTurn, turns: n.turns, state: n.state, outcome: n.outcome, finish: n.finish, reward: n.reward, children: n.children })),
            branch_points: branchPoints(nodes).map((p) => ({ parent_id: p.parentId, turn: p.turn, children: p.children, rewards: p.rewards, mean: p.mean, std: p.std })),
          },
        };
      },
    },
    {
      method: 'GET',
      path: '/v1/prefixes/:id',
      handler: (r) => {
        const rt = running(service);
        const p = rt.prefix?.(r.params.id!);
        if (!p) throw new HttpError(404, 'NOT_FOUND', `no prefix ${r.params.id!.slice(0, 200)} (held while a branch referencing it is live or retained)`);
        return { status: 200, body: { id: r.params.id, trajectory: p } };
      },
    },
  ];
}
