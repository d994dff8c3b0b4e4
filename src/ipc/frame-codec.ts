import { Packr } from 'msgpackr';
import { ProtocolError } from '../errors.js';

/** Default largest frame body either side accepts: 64 MiB. */
export const DEFAULT_MAX_FRAME_BYTES = 64 * 1024 * 1024;

// Records (msgpackr's extension 0x72 structures) would make the stream unreadable for a peer in
// another language, so they are off on both sides; maps decode to plain objects.
const packr = new Packr({ useRecords: false, mapsAsObjects: true, moreTypes: false });

/**
 * Encodes one message as a frame: a 4-byte big-endian body length, then the msgpack map.
 * @throws ProtocolError when the body is larger than `maxFrameBytes` (nothing is sent).
 */
export function encodeFrame(message: Record<string, unknown>, maxFrameBytes = DEFAULT_MAX_FRAME_BYTES): Buffer {
  const body = packr.pack(message);
  if (body.length > maxFrameBytes) {
    throw new ProtocolError(`frame of ${body.length} bytes exceeds the maximum of ${maxFrameBytes}`, {
      code: 'FRAME_TOO_LARGE',
      details: { bytes: body.length, maxFrameBytes },
    });
  }
  const frame = Buffer.allocUnsafe(4 + body.length);
  frame.writeUInt32BE(body.length, 0);
  frame.set(body, 4);
  return frame;
}

/**
 * Splits a byte stream into messages. Feed it every chunk read from the socket; it returns the
 * complete messages so far and keeps the partial tail.
 *
 * Guarantees: never buffers more than one frame of at most `maxFrameBytes` (the length header is
 * checked before the body is collected); after it has thrown, it stays failed.
 */
export class FrameDecoder {
  private chunks: Buffer[] = [];
  private buffered = 0;
  private failed: ProtocolError | null = null;

  constructor(private readonly maxFrameBytes = DEFAULT_MAX_FRAME_BYTES) {}

  /**
   * Adds bytes and returns every complete message.
   * @throws ProtocolError (`FRAME_TOO_LARGE`, `UNDECODABLE`, `NOT_A_MAP`) on a bad frame.
   */
  push(chunk: Buffer): Record<string, unknown>[] {
    if (this.failed) throw this.failed;
    this.chunks.push(chunk);
    this.buffered += chunk.length;
    const out: Record<string, unknown>[] = [];
    while (this.buffered >= 4) {
      let buf = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks, this.buffered);
      this.chunks = [buf];
      const len = buf.readUInt32BE(0);
      if (len > this.maxFrameBytes) {
        throw this.fail(new ProtocolError(`incoming frame of ${len} bytes exceeds the maximum of ${this.maxFrameBytes}`, {
          code: 'FRAME_TOO_LARGE',
          details: { bytes: len, maxFrameBytes: this.maxFrameBytes },
        }));
      }
      if (this.buffered < 4 + len) break;
      const body = buf.subarray(4, 4 + len);
      buf = buf.subarray(4 + len);
      this.chunks = buf.length ? [buf] : [];
      this.buffered = buf.length;
      out.push(this.decode(body));
    }
    return out;
  }

  private decode(body: Buffer): Record<string, unknown> {
    let value: unknown;
    try {
      value = packr.unpack(body);
    } catch (cause) {
      throw this.fail(new ProtocolError('undecodable msgpack frame', { code: 'UNDECODABLE', cause }));
    }
    // msgpackr returns class instances for some bytes (e.g. 0xc1); only a plain map is a message.
    const proto = value !== null && typeof value === 'object' ? Object.getPrototypeOf(value) : undefined;
    if (proto !== Object.prototype && proto !== null) {
      throw this.fail(new ProtocolError('a frame must hold one msgpack map', { code: 'NOT_A_MAP' }));
    }
    return value as Record<string, unknown>;
  }

  private fail(err: ProtocolError): ProtocolError {
    this.failed = err;
    this.chunks = [];
    this.buffered = 0;
    return err;
  }
}
