/** Seeds are kept in [0, 2^31): every engine takes them (llama.cpp's are 32-bit, vLLM's and SGLang's any int). */
const MOD = 2n ** 31n;
/** An odd step, so i ↦ (seed + i·STEP) mod 2^31 is one-to-one: no two members share a seed. */
const STEP = 0x5851f42dn; // odd (PCG's multiplier's low word): neighbouring members' seeds lie far apart

/**
 * The seed of member `index` of a GRPO group submitted with one `seed`. A trainer sets one seed
 * for the group to make the group reproducible; sending that seed to every member would make all n
 * trajectories identical (zero advantage). Member 0 keeps the group's seed (reduced into
 * [0, 2^31)); members 0 … 2^31−1 all get distinct seeds. The same member keeps its seed on every
 * turn (the prompt differs per turn, so the samples do).
 */
export function memberSeed(seed: number, index: number): number {
  // BigInt: STEP·index passes 2^53 for large indices. Called once per member at submit.
  const base = ((BigInt(Math.trunc(seed)) % MOD) + MOD) % MOD;
  return Number((base + STEP * BigInt(index)) % MOD);
}
