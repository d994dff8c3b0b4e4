import { describe, expect, it } from 'vitest';
import fc from 'fast-check';
import { Packr, unpack } from 'msgpackr';
import { FrameDecoder, encodeFrame } from '../../../src/ipc/frame-codec.js';
import { ProtocolError } from '../../../src/errors.js';

describe('frame codec', () => {
  it('round-trips a map split across arbitrary chunks', () => {
    const frame = Buffer.concat([encodeFrame({ type: 'a', id: 1, text: 'héllo' }), encodeFrame({ type: 'b' })]);
    const dec = new FrameDecoder();
    const out = [];
    for (const byte of frame) out.push(...dec.push(Buffer.from([byte])));
    expect(out).toEqual([{ type: 'a', id: 1, text: 'héllo' }, { type: 'b' }]);
  });

  it('writes a 4-byte big-endian length followed by a plain msgpack map without records', () => {
    const frame = encodeFrame({ type: 'x', id: 7 });
    expect(frame.readUInt32BE(0)).toBe(frame.length - 4);
    // a map header (fixmap, map16 or map32), never a record extension: any msgpack library reads it.
    expect([0x82, 0xde, 0xdf]).toContain(frame[4]);
  });

  it('refuses to encode a frame over the maximum size', () => {
    expect(() => encodeFrame({ type: 'x', blob: 'a'.repeat(100) }, 50)).toThrow(ProtocolError);
  });

  it('fails with FRAME_TOO_LARGE from the length header alone, before the body arrives', () => {
    const header = Buffer.alloc(4);
    header.writeUInt32BE(1_000_000);
    expect(() => new FrameDecoder(1000).push(header)).toThrow(expect.objectContaining({ code: 'FRAME_TOO_LARGE' }));
  });

  it('fails with UNDECODABLE on bytes that are not msgpack', () => {
    const body = Buffer.from([0x82, 0xa4]); // a map cut short
    const frame = Buffer.concat([Buffer.from([0, 0, 0, 2]), body]);
    expect(() => new FrameDecoder().push(frame)).toThrow(expect.objectContaining({ code: 'UNDECODABLE' }));
  });

  it('fails with NOT_A_MAP on the never-used byte 0xc1', () => {
    expect(() => new FrameDecoder().push(Buffer.from([0, 0, 0, 1, 0xc1]))).toThrow(expect.objectContaining({ code: 'NOT_A_MAP' }));
  });

  it('fails with NOT_A_MAP on a frame holding an array', () => {
    const body = new Packr({ useRecords: false }).pack([1, 2]);
    const frame = Buffer.concat([Buffer.from([0, 0, 0, body.length]), body]);
    expect(() => new FrameDecoder().push(frame)).toThrow(expect.objectContaining({ code: 'NOT_A_MAP' }));
  });

  it('encodes any plain JSON-like value so that a standard msgpack decoder reads it back', () => {
    fc.assert(
      // `__proto__` keys are left out: msgpackr's decoder drops them (prototype-pollution guard).
      fc.property(fc.dictionary(fc.string(), fc.jsonValue()).filter((v) => !JSON.stringify(v).includes('"__proto__"')), (value) => {
        const frame = encodeFrame({ type: 't', value });
        expect(frame.readUInt32BE(0)).toBe(frame.length - 4);
        expect(unpack(frame.subarray(4))).toEqual({ type: 't', value: JSON.parse(JSON.stringify(value)) });
      }),
      { numRuns: 300 },
    );
  });

  it('writes integers at every width boundary and non-integers as float64', () => {
    const nums = [0, 127, 128, 255, 256, 65535, 65536, 2 ** 32 - 1, 2 ** 32, 2 ** 53 - 1, -1, -32, -33, -128, -129, -32768, -32769, -(2 ** 31), -(2 ** 31) - 1, 1.5, -0.25, 1e300];
    const frame = encodeFrame({ type: 'n', nums });
    expect(unpack(frame.subarray(4))).toEqual({ type: 'n', nums });
  });

  it('writes strings of every length class, ASCII or not', () => {
    const strs = ['', 'a', 'é', 'x'.repeat(31), 'x'.repeat(32), 'ü'.repeat(200), 'y'.repeat(70_000), '😀 emoji'];
    expect(unpack(encodeFrame({ type: 's', strs }).subarray(4))).toEqual({ type: 's', strs });
  });

  it('leaves out keys whose value is undefined, so a peer never sees an extension type', () => {
    const frame = encodeFrame({ type: 'u', id: 1, isInput: undefined });
    expect(unpack(frame.subarray(4))).toEqual({ type: 'u', id: 1 });
    expect(frame.includes(0xd4)).toBe(false);
  });

  it('falls back to msgpackr for values beyond plain data, such as a Buffer', () => {
    const frame = encodeFrame({ type: 'b', blob: Buffer.from([1, 2, 3]) });
    const back = unpack(frame.subarray(4)) as { blob: Uint8Array };
    expect([...back.blob]).toEqual([1, 2, 3]);
  });
});
