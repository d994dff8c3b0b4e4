import type { ProtocolAdapter } from './protocol.js';
import { prorlProtocol } from './prorl.js';
import { sglangProtocol } from './sglang.js';
import { vllmProtocol } from './vllm.js';

export type { ProtocolAdapter, ParsedGeneration } from './protocol.js';
export { prorlProtocol, vllmProtocol, sglangProtocol };

/** The adapter of a protocol name. */
export const protocols: Readonly<Record<ProtocolAdapter['name'], ProtocolAdapter>> = Object.freeze({
  prorl: prorlProtocol,
  vllm: vllmProtocol,
  sglang: sglangProtocol,
});
