export type { AgentHandler, HandlerContext, InitResult, ActContext, ActResult, EvalContext, EvalResult, Observation } from '../proxy/agent-contract.js';
export { HandlerRegistry } from './registry.js';
export { defineToolAgent, toolAgentAct, type ToolAgentDefinition } from './tool-agent.js';
export { TOOL_SCHEMAS, ALL_TOOLS, toolSchemas, runToolCall, type ToolName } from './tools.js';
export { builtinHandlers } from './builtin.js';
