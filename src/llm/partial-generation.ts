import type { GenerateResult } from './llm-client.js';
import type { VersionRun } from './weight-versions.js';

/** A generation that may span versions: the result plus its output's versions, run-length. */
export interface SegmentedResult extends GenerateResult {
  /** Sums to `outputIds.length`; one run per version (adjacent equal versions merged). */
  weightVersions: VersionRun[];
}

/** The result as one segment (all its tokens at its version). */
export function segmented(r: GenerateResult): SegmentedResult {
  return { ...r, weightVersions: r.outputIds.length ? [{ version: r.weightVersion, tokens: r.outputIds.length }] : [] };
}

/**
 * Joins a partial generation (aborted by its engine, e.g. for a weight update) with the
 * continuation re-issued on `prompt + partial ids`: output = prefix + continuation, logprobs
 * likewise, each token keeping the version that sampled it. The finish reason, backend and
 * version of the whole are the continuation's (the newest); so is the logprob meaning.
 */
export function joinPartial(prefix: SegmentedResult, cont: GenerateResult): SegmentedResult {
  const runs = prefix.weightVersions.map((r) => ({ ...r }));
  const n = cont.outputIds.length;
  if (n > 0) {
    const last = runs[runs.length - 1];
    if (last && last.version === cont.weightVersion) last.tokens += n;
    else runs.push({ version: cont.weightVersion, tokens: n });
  }
  return {
    ...cont,
    outputIds: prefix.outputIds.concat(cont.outputIds),
    logprobs: prefix.logprobs.concat(cont.logprobs),
    tokenSource: prefix.tokenSource === 'retokenized' || cont.tokenSource === 'retokenized' ? 'retokenized' : cont.tokenSource,
    weightVersions: runs,
  };
}
