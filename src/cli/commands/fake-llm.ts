/** `rollout fake-llm` — not written yet (see the issues); replaced by its owner. */
export async function run(_argv: string[]): Promise<number> {
  process.stderr.write('rollout fake-llm: not available yet\n');
  return 1;
}
