/**
 * A seeded 32-bit generator (xorshift32) returning floats in [0, 1): the same seed gives the same
 * stream on every machine. Used where runs must be reproducible — the tiny model's weights
 * (byte-for-byte), the fake server's random policy and failure draws, fuzz cases. Seed 0 is
 * replaced by a fixed non-zero constant (xorshift never leaves 0).
 */
export function xorshift32(seed: number): () => number {
  let x = seed >>> 0 || 0x9e3779b9;
  return () => {
    x ^= x << 13;
    x >>>= 0;
    x ^= x >>> 17;
    x ^= x << 5;
    x >>>= 0;
    return x / 0x100000000;
  };
}
