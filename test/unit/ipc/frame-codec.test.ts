import { describe, expect, it } from 'vitest';
import { Packr } from 'msgpackr';
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
});
