import type { ChatCodec } from '../llm/chat-codec.js';
import type { RolloutSummary, Runtime } from '../runtime/runtime-api.js';
import type { BackendInfo, BackendSpec } from '../llm/llm-client.js';
import type { ClusterNodeStatus } from '../protocol/cluster.js';

/**
 * Backend management the service needs from a runtime. The runtime delegates these to its
 * backend pool (a ManagedLlmClient); a runtime without them answers the backend routes with 501.
 */
export interface BackendControl {
  addBackend(spec: BackendSpec): BackendInfo;
  drainBackend(id: string): boolean;
  removeBackend(id: string): boolean;
  listBackends(): BackendInfo[];
  setWeightVersion?(version: string | number, backendId?: string): void;
}

/** Async-RL control the service needs from a runtime (the embedded runtime has it); without it `/v1/weights/*` answer 501. */
export interface GenerationControl {
  pauseGeneration(): void;
  resumeGeneration(): void;
  readonly generationPaused: boolean;
  setTrainerVersion(version: string | number): void;
  readonly trainerVersion: string | number | null;
  /** Aborts the engines' generations in flight (SGLang's `/abort_request`), per-engine report. */
  abortGeneration?(): Promise<{ id: string; aborted: number | null; error?: string }[]>;
}

/**
 * The runtime as the service sees it: the embedded {@link Runtime}, plus — when the runtime has
 * them — backend control and the list of data sources its handler registry knows (used to
 * refuse an unknown `data_source` with a 400 at submit).
 */
export type ServiceRuntime = Runtime &
  Partial<BackendControl> &
  Partial<GenerationControl> & {
    dataSources?(): readonly string[];
    /** The runtime's admission limit, when it tells it: lets a batch be refused before any work. */
    readonly options?: { readonly maxQueued: number };
    /**
     * The image store this runtime's sandboxes read images from, when it runs sandboxes on this
     * machine (absent on a `--redis` gateway): lets a task naming a missing image be refused at submit.
     */
    readonly imageStore?: string;
    /** The sandbox hosts' fork pools summed (an embedded runtime), for `/metrics`; null without pools. */
    forkPoolStats?(): Promise<import('../protocol/sandbox.js').ForkPoolStats | null>;
    /** The cluster's live workers (a gateway), for the operational log. */
    workerIds?(): readonly string[];
    /** The cluster's live workers' last heartbeats (a gateway), for Polar's `/nodes`. */
    workerNodes?(): { heartbeatMs: number; nodes: readonly ClusterNodeStatus[] };
    /** A gateway: whether every live worker applied the last generation pause/resume, and their LLM calls in flight. */
    generationDrain?(): { acked: boolean; inflight: number };
    /** A rollout `get` does not know locally, looked up where the runtime keeps it (the Redis cluster). */
    lookup?(id: string): Promise<RolloutSummary | undefined>;
    /** A stored shared prefix of a fork (#26), where the runtime forks. */
    prefix?(id: string): import('../protocol/trajectory.js').Trajectory | undefined;
    /**
     * The codec rollouts are tokenized with on a backend registered without a `tokenizer`:
     * such a registration is checked against it (`backendCodecKey`). Absent where the runtime
     * tokenizes nothing itself (a cluster gateway). `decode`, when present, gives the
     * visualizer's token view its text (`GET /v1/rollouts/:id/tokens`).
     */
    readonly codec?: Pick<ChatCodec, 'name' | 'encode'> & Partial<Pick<ChatCodec, 'decode'>>;
    /** The codec one rollout was tokenized with when it is not {@link codec} (a job's `custom_tokenizer`); undefined: not known here. */
    codecOf?(id: string): Pick<ChatCodec, 'name' | 'decode'> | undefined;
  };

/** A handle whose submission is durable only once `accepted` resolves (the Redis cluster); answer 202 after it. */
export interface AcceptedHandle {
  accepted?: Promise<unknown>;
}

/** Makes a fresh runtime: once at start-up and again on each ProRL `/start` after a `/stop`. */
export type RuntimeFactory = () => Promise<ServiceRuntime>;
