import type { IncomingMessage } from 'node:http';
import type { Clock } from '../../clock.js';
import type { ClusterNodeStatus } from '../../protocol/cluster.js';
import type { ServiceRuntime } from '../service-runtime.js';

/** Polar's `GatewayNodeInfo`, one per node. */
export type GatewayNodeInfo = Record<string, unknown>;

type Stages = ReturnType<ServiceRuntime['status']>['stages'];

/**
 * The nodes Polar's `/nodes` lists: each live worker of a `--redis` cluster (from its last
 * heartbeat: its stage limits and occupancy, `healthy` false while its sandboxes fail), else this
 * one runtime. None while the service is stopped.
 */
export function polarNodes(rt: ServiceRuntime | null, nodeId: string, req: IncomingMessage | null, clock: Clock): GatewayNodeInfo[] {
  if (!rt) return [];
  const url = gatewayUrl(req);
  const cluster = rt.workerNodes?.();
  if (cluster) return cluster.nodes.map((n) => workerInfo(n, url, cluster.heartbeatMs));
  const st = rt.status();
  return [
    {
      node_id: nodeId,
      gateway_url: url,
      ...stageInfo(st.stages),
      dispatch_reservations: 0,
      healthy: st.state === 'running',
      draining: st.state !== 'running',
      heartbeat_interval_seconds: 30,
      last_heartbeat: new Date(clock.now()).toISOString(),
    },
  ];
}

/** `{total, healthy}` of {@link polarNodes} (`/rollout/status`, `/health`). */
export function nodeCounts(nodes: GatewayNodeInfo[]): { total: number; healthy: number } {
  return { total: nodes.length, healthy: nodes.filter((n) => n['healthy'] === true).length };
}

function workerInfo(n: ClusterNodeStatus, url: string, heartbeatMs: number): GatewayNodeInfo {
  return {
    node_id: n.nodeId,
    // Workers take their jobs from Redis and serve no HTTP: every session goes through this gateway.
    gateway_url: url,
    ...stageInfo(n.stages),
    dispatch_reservations: 0,
    healthy: n.unhealthy === undefined,
    draining: false,
    heartbeat_interval_seconds: heartbeatMs / 1000,
    last_heartbeat: new Date(n.at).toISOString(),
    // Ours, beside Polar's fields.
    pid: n.pid,
    capacity: n.capacity,
    running: n.running,
    completed: n.completed,
    ...(n.unhealthy !== undefined ? { unhealthy_reason: n.unhealthy } : {}),
  };
}

function stageInfo(s: Stages): Record<string, unknown> {
  return {
    max_init_workers: s.init.limit,
    max_run_workers: s.run.limit,
    max_postrun_workers: s.eval.limit,
    metrics: {
      init_queue_depth: s.init.waiting,
      init_inflight: s.init.active,
      ready_depth: s.run.waiting,
      run_inflight: s.run.active,
      postrun_queue_depth: s.eval.waiting,
      postrun_inflight: s.eval.active,
    },
  };
}

function gatewayUrl(req: IncomingMessage | null): string {
  const host = req && typeof req.headers.host === 'string' && /^[\w.:[\]-]+$/.test(req.headers.host) ? req.headers.host : 'localhost';
  return `http://${host}`;
}
