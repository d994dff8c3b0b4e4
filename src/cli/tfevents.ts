/**
 * A TensorBoard event file (`events.out.tfevents.*`) of scalars, written by hand: the format is
 * small and fixed — a TFRecord (per record: the length as a little-endian u64, its masked
 * CRC32C, the bytes, their masked CRC32C) of `tensorflow.Event` protos, the first one naming the
 * file version, each next one a `Summary` of `simple_value`s at a step. TensorBoard, and every
 * tracker that imports TensorBoard logs (Weights & Biases' `sync_tensorboard`, MLflow, Aim,
 * ClearML), read it as it is. No dependency: an npm package for this pulls in a protobuf runtime
 * for four fields, and the format has not changed since 2016.
 *
 * Field numbers (tensorflow/core/util/event.proto, summary.proto): Event { double wall_time = 1;
 * int64 step = 2; string file_version = 3; Summary summary = 5 }; Summary { repeated Value value
 * = 1 }; Value { string tag = 1; float simple_value = 2 }.
 */

/** One scalar at a step. */
export interface Scalar {
  tag: string;
  value: number;
}

/** The Castagnoli CRC-32 table (reflected polynomial 0x82f63b78), as TFRecord uses. */
const CRC32C = (() => {
  const t = new Uint32Array(256);
  for (let n = 0; n < 256; n++) {
    let c = n;
    for (let k = 0; k < 8; k++) c = c & 1 ? 0x82f63b78 ^ (c >>> 1) : c >>> 1;
    t[n] = c >>> 0;
  }
  return t;
})();

/** CRC-32C of `buf`. */
export function crc32c(buf: Uint8Array): number {
  let c = 0xffffffff;
  for (let i = 0; i < buf.length; i++) c = CRC32C[(c ^ buf[i]!) & 0xff]! ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}

/** TFRecord's masked CRC: rotated right by 15 and offset, so a CRC of CRCs is not trivially zero. */
function masked(crc: number): number {
  return (((crc >>> 15) | (crc << 17)) + 0xa282ead8) >>> 0;
}

/** Protobuf base-128 varint of a non-negative integer below 2^53. */
function varint(n: number): number[] {
  const out: number[] = [];
  while (n >= 0x80) {
    out.push((n % 0x80) | 0x80);
    n = Math.floor(n / 0x80);
  }
  out.push(n);
  return out;
}

/** A length-delimited field (wire type 2). */
function bytesField(field: number, body: Uint8Array | number[]): number[] {
  return [...varint((field << 3) | 2), ...varint(body.length), ...body];
}

function doubleField(field: number, v: number): number[] {
  const b = Buffer.alloc(8);
  b.writeDoubleLE(v);
  return [(field << 3) | 1, ...b];
}

function floatField(field: number, v: number): number[] {
  const b = Buffer.alloc(4);
  b.writeFloatLE(v);
  return [(field << 3) | 5, ...b];
}

/** One `Event` proto: the file version when `scalars` is null, else a summary at `step`. */
function event(wallTime: number, step: number, scalars: readonly Scalar[] | null): Buffer {
  const out = doubleField(1, wallTime);
  if (step !== 0) out.push(...varint(2 << 3), ...varint(step));
  if (scalars === null) out.push(...bytesField(3, Buffer.from('brain.Event:2')));
  else {
    const values = scalars.flatMap((s) => bytesField(1, [...bytesField(1, Buffer.from(s.tag)), ...floatField(2, s.value)]));
    out.push(...bytesField(5, values));
  }
  return Buffer.from(out);
}

/** Frames `data` as one TFRecord. */
function record(data: Buffer): Buffer {
  const len = Buffer.alloc(8);
  len.writeBigUInt64LE(BigInt(data.length));
  const head = Buffer.alloc(4);
  head.writeUInt32LE(masked(crc32c(len)));
  const tail = Buffer.alloc(4);
  tail.writeUInt32LE(masked(crc32c(data)));
  return Buffer.concat([len, head, data, tail]);
}

/**
 * The bytes of an event file holding `steps` (each a step number, its wall time in seconds since
 * the epoch and its scalars), after the file-version record. Throws RangeError on a negative or
 * non-integer step, or a non-finite value (TensorBoard would show garbage).
 */
export function eventFile(startWallTime: number, steps: readonly { step: number; wallTime: number; scalars: readonly Scalar[] }[]): Buffer {
  const parts = [record(event(startWallTime, 0, null))];
  for (const s of steps) {
    if (!Number.isSafeInteger(s.step) || s.step < 0) throw new RangeError(`tfevents: step must be a non-negative integer (got ${s.step})`);
    const bad = s.scalars.find((x) => !Number.isFinite(x.value));
    if (bad) throw new RangeError(`tfevents: scalar '${bad.tag}' at step ${s.step} is not finite (${bad.value})`);
    parts.push(record(event(s.wallTime, s.step, s.scalars)));
  }
  return Buffer.concat(parts);
}
