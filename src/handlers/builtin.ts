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
