import type { AgentHandler } from '../proxy/agent-contract.js';
import { codeHandler } from './tasks/code.js';
import { harnessHandler } from './tasks/harness.js';
import { mathHandler } from './tasks/math.js';
import { shellHandler } from './tasks/shell.js';
import { stemHandler } from './tasks/stem.js';
import { sweHandler } from './tasks/swe.js';

/**
 * The task handlers a runtime registers by default, with the `data_source` values they serve:
 * `math` (`deepscaler`), `code` (`deepcoder`), `swe` (`swebench`), `stem` (`gpqa`, `mmlu`) and
 * `shell`, and `harness` (any agent program, through a per-rollout LLM proxy). Users add their own with the `handlers` option. See docs/tasks.md.
 */
export const builtinHandlers: AgentHandler[] = [mathHandler, codeHandler, sweHandler, stemHandler, shellHandler, harnessHandler];

/**
 * The family a `data_source` is counted under: the handler whose name or alias it is (the first
 * such handler wins), else the data source itself. `rollout run`'s summary and metrics and the
 * visualizer's alias table (`/visualizer/info.json`) all merge by this one rule.
 */
export function familyOf(dataSource: string, handlers: readonly AgentHandler[] = builtinHandlers): string {
  return handlers.find((h) => h.name === dataSource || h.aliases?.includes(dataSource))?.name ?? dataSource;
}
