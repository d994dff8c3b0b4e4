import type { BackendProtocol } from '../llm-client.js';
import type { ProtocolAdapter } from './protocol.js';
import { openaiProtocol } from './openai.js';
import { prorlProtocol } from './prorl.js';
import { sglangProtocol } from './sglang.js';
import { vllmProtocol } from './vllm.js';

export type { ProtocolAdapter, ParsedGeneration } from './protocol.js';
export { prorlProtocol, vllmProtocol, sglangProtocol, openaiProtocol };

/** The adapter of a protocol name. */
export const protocols: Readonly<Record<BackendProtocol, ProtocolAdapter>> = Object.freeze({
  prorl: prorlProtocol,
  vllm: vllmProtocol,
  sglang: sglangProtocol,
  openai: openaiProtocol,
});

/** The protocol names, for validation messages. */
export const PROTOCOL_NAMES: readonly BackendProtocol[] = Object.freeze(['prorl', 'vllm', 'sglang', 'openai']);
