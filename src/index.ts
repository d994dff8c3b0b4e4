/**
 * rollout-runtime: the supported public API. Internals are not re-exported; test fakes live in
 * `rollout-runtime/testing`.
 */
export { createRuntime, type EmbeddedRuntime } from './runtime/runtime.js';
export type { Runtime, RolloutHandle, GroupHandle, SubmitOptions, RuntimeStatus, RolloutSummary, EventsOptions } from './runtime/runtime-api.js';
// Tree rollouts (#26): forks, tree groups, shared prefixes.
export type { ForkControl, ForkOptions, ForkResult, GroupOptions, TreeOptions, TreeNode, RolloutTree, BranchPoint, MaterializeOptions } from './runtime/runtime-api.js';
export { branchPoints, treeNodes } from './runtime/rollout-tree.js';
export { materializeTrajectory, stripPrefix } from './runtime/trajectory-prefix.js';
export { RuntimeOptionsSchema, parseRuntimeOptions, type RuntimeOptions, type RuntimeOptionsInput } from './runtime/runtime-options.js';
export { RolloutBuffer, type BufferedGroup, type BufferEvent, type BufferLease, type LeaseOutcome, type RolloutBufferStats } from './runtime/rollout-buffer.js';
export { RolloutBufferOptionsSchema, type RolloutBufferOptions, type RolloutBufferOptionsInput } from './protocol/buffer.js';
export { systemClock, type Clock } from './clock.js';
export type { EventGap, EventItem } from './runtime/event-hub.js';
export * from './errors.js';
export * from './protocol/index.js';
export type { AgentHandler, HandlerContext, InitResult, ActContext, ActResult, EvalContext, EvalResult, Observation } from './proxy/agent-contract.js';
export { HandlerRegistry } from './handlers/registry.js';
export { defineToolAgent, toolAgentAct, type ToolAgentDefinition } from './handlers/tool-agent.js';
export { TOOL_SCHEMAS, ALL_TOOLS, toolSchemas, type ToolName } from './handlers/tools.js';
export { builtinHandlers } from './handlers/builtin.js';
export type { LlmClient, ManagedLlmClient, GenerateRequest, GenerateResult, BackendSpec, BackendInfo, BackendProtocol, ChatContext, LogprobSemantics } from './llm/llm-client.js';
export { memberSeed } from './llm/member-seed.js';
export type { ChatCodec, ParsedAssistant } from './llm/chat-codec.js';
export { TrajectoryBuilder, type SampledTurn, type TrajectoryBuilderOptions } from './llm/trajectory-builder.js';
export type { Sandbox, SandboxProvider, SandboxSpec, BashRequest, BashResult, PythonResult, EditorRequest, EditorResult } from './sandbox/sandbox.js';

// The real parts, for trainers that build or share them (a pool shared by several runtimes).
export { BackendPool } from './llm/backend-pool.js';
export { BackendPoolOptionsSchema, type BackendPoolOptionsInput } from './llm/backend-pool-options.js';
export { parseBackendAddress } from './llm/backend-address.js';
export { OracleBackend, ORACLE_ADDRESS, type OracleBackendOptions } from './llm/oracle-backend.js';
export { createQwen3Codec } from './llm/qwen3-codec.js';
export { createHfCodec, type HfChatCodec, type HfCodecOptions } from './llm/hf-codec.js';
export { createSandboxProvider, type HostSandboxProvider } from './sandbox/sandbox-provider.js';
export { SandboxOptionsSchema, type SandboxOptionsInput } from './sandbox/sandbox-options.js';
export { detectDriver, type DriverDetection, type DriverName } from './sandbox/drivers.js';
export { reapStale, type ReapReport } from './sandbox/lease.js';
// The service, embeddable in another process, and XState inspection.
export { createService, RolloutService } from './server/service.js';
export { serviceRuntimeFactory, type ServiceRuntimeParts } from './server/runtime-factory.js';
export { createInspector, type InspectorOptions, type InspectSelection, type RuntimeInspector } from './runtime/inspection.js';
