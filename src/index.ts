/**
 * rollout-runtime: the supported public API. Internals are not re-exported; test fakes live in
 * `rollout-runtime/testing`.
 */
export { createRuntime, type EmbeddedRuntime } from './runtime/runtime.js';
export type { Runtime, RolloutHandle, GroupHandle, SubmitOptions, RuntimeStatus, RolloutSummary, EventsOptions } from './runtime/runtime-api.js';
export { RuntimeOptionsSchema, parseRuntimeOptions, type RuntimeOptions, type RuntimeOptionsInput } from './runtime/runtime-options.js';
export { systemClock, type Clock } from './runtime/clock.js';
export type { EventGap, EventItem } from './runtime/event-hub.js';
export * from './errors.js';
export * from './protocol/index.js';
export type { AgentHandler, HandlerContext, InitResult, ActContext, ActResult, EvalContext, EvalResult, Observation } from './handlers/agent-handler.js';
export { HandlerRegistry } from './handlers/registry.js';
export { defineToolAgent, toolAgentAct, type ToolAgentDefinition } from './handlers/tool-agent.js';
export { TOOL_SCHEMAS, ALL_TOOLS, toolSchemas, type ToolName } from './handlers/tools.js';
export { builtinHandlers } from './handlers/builtin.js';
export type { LlmClient, ManagedLlmClient, GenerateRequest, GenerateResult, BackendSpec, BackendInfo } from './llm/llm-client.js';
export type { ChatCodec, ParsedAssistant } from './llm/chat-codec.js';
export { TrajectoryBuilder, type SampledTurn, type TrajectoryBuilderOptions } from './llm/trajectory-builder.js';
export type { Sandbox, SandboxProvider, SandboxSpec, BashRequest, BashResult, PythonResult, EditorRequest, EditorResult } from './sandbox/sandbox.js';
