/** `rollout llm-serve` — not written yet (see the issues); replaced by its owner. */
export async function run(_argv: string[]): Promise<number> {
  process.stderr.write('rollout llm-serve: not available yet\n');
  return 1;
}
