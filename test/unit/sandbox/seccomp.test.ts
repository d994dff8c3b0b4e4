import { describe, expect, it } from 'vitest';
import fs from 'node:fs';
import {
  ALLOWED_PERSONALITIES,
  DENIED_SYSCALLS,
  ENOSYS,
  EPERM,
  SECCOMP_RET_ALLOW,
  SECCOMP_RET_ERRNO,
  SECCOMP_RET_KILL_PROCESS,
  buildSeccompProgram,
  encodeSeccompProgram,
  type BpfInsn,
} from '../../../src/sandbox/seccomp.js';

const X64 = 0xc000003e;
const I386 = 0x40000003;
const ARM64 = 0xc00000b7;

/** A classic-BPF interpreter for the opcodes the generator emits, over struct seccomp_data. */
function run(prog: BpfInsn[], data: { nr: number; arch: number; args?: number[] }): number {
  const word = (off: number): number => {
    if (off === 0) return data.nr >>> 0;
    if (off === 4) return data.arch >>> 0;
    if (off >= 16 && (off - 16) % 8 === 0) return (data.args?.[(off - 16) / 8] ?? 0) >>> 0;
    throw new Error(`unexpected load offset ${off}`);
  };
  let a = 0;
  for (let pc = 0, steps = 0; pc < prog.length && steps < 10_000; steps++) {
    const ins = prog[pc]!;
    switch (ins.code) {
      case 0x20:
        a = word(ins.k);
        pc++;
        break;
      case 0x15:
        pc += 1 + (a === ins.k ? ins.jt : ins.jf);
        break;
      case 0x35:
        pc += 1 + (a >= ins.k ? ins.jt : ins.jf);
        break;
      case 0x45:
        pc += 1 + ((a & ins.k) !== 0 ? ins.jt : ins.jf);
        break;
      case 0x06:
        return ins.k >>> 0;
      default:
        throw new Error(`unknown opcode ${ins.code}`);
    }
  }
  throw new Error('program ran off its end');
}

const prog = buildSeccompProgram('x64');
const deny = (SECCOMP_RET_ERRNO | EPERM) >>> 0;

describe('the seccomp filter (x86_64)', () => {
  it('allows ordinary syscalls: read, write, openat, execve, mmap', () => {
    for (const nr of [0, 1, 257, 59, 9]) expect(run(prog, { nr, arch: X64 })).toBe(SECCOMP_RET_ALLOW);
  });

  it('refuses mount, ptrace, keyctl, bpf, unshare, setns, init_module with EPERM', () => {
    for (const nr of [165, 101, 250, 321, 272, 308, 175, 298, 323, 304]) expect(run(prog, { nr, arch: X64 })).toBe(deny);
  });

  it('refuses every x32-ABI syscall, even read', () => {
    expect(run(prog, { nr: 0x40000000, arch: X64 })).toBe(deny);
    expect(run(prog, { nr: 0x40000000 + 165, arch: X64 })).toBe(deny);
  });

  it('kills a process that switches to the i386 ABI (whose numbers differ)', () => {
    expect(run(prog, { nr: 21 /* i386 mount */, arch: I386 })).toBe(SECCOMP_RET_KILL_PROCESS);
  });

  it('allows clone for threads and fork, refuses it with any CLONE_NEW* flag', () => {
    expect(run(prog, { nr: 56, arch: X64, args: [0x3d0f00] })).toBe(SECCOMP_RET_ALLOW); // pthread_create's flags
    expect(run(prog, { nr: 56, arch: X64, args: [0x01200011] })).toBe(SECCOMP_RET_ALLOW); // fork()
    for (const flag of [0x00020000, 0x10000000, 0x20000000, 0x40000000, 0x02000000]) {
      expect(run(prog, { nr: 56, arch: X64, args: [0x11 | flag] })).toBe(deny);
    }
  });

  it('answers clone3 and io_uring with ENOSYS so callers fall back', () => {
    for (const nr of [435, 425, 426, 427]) expect(run(prog, { nr, arch: X64 })).toBe((SECCOMP_RET_ERRNO | ENOSYS) >>> 0);
  });

  it('allows only the harmless personality values', () => {
    for (const p of ALLOWED_PERSONALITIES) expect(run(prog, { nr: 135, arch: X64, args: [p] })).toBe(SECCOMP_RET_ALLOW);
    expect(run(prog, { nr: 135, arch: X64, args: [0x0040000] /* ADDR_NO_RANDOMIZE */ })).toBe(deny);
    expect(run(prog, { nr: 135, arch: X64, args: [0x0400000] /* READ_IMPLIES_EXEC */ })).toBe(deny);
  });

  it('refuses the ioctls that type into a terminal (TIOCSTI, TIOCLINUX) by their low 32 bits, and allows the others', () => {
    for (const cmd of [0x5412, 0x541c]) expect(run(prog, { nr: 16, arch: X64, args: [0, cmd] })).toBe(deny);
    for (const cmd of [0x5401 /* TCGETS */, 0x5413 /* TIOCGWINSZ */, 0x541b /* FIONREAD */]) expect(run(prog, { nr: 16, arch: X64, args: [0, cmd] })).toBe(SECCOMP_RET_ALLOW);
  });

  it('uses the numbers of the kernel headers', () => {
    const header = '/usr/include/x86_64-linux-gnu/asm/unistd_64.h';
    if (!fs.existsSync(header)) return; // needs linux-libc-dev
    const text = fs.readFileSync(header, 'utf8');
    for (const name of DENIED_SYSCALLS) {
      const m = new RegExp(`#define __NR_${name} (\\d+)`).exec(text);
      if (!m) continue;
      expect(run(prog, { nr: Number(m[1]), arch: X64 }), name).toBe(deny);
    }
  });

  it('encodes 8 bytes per instruction in sock_filter layout', () => {
    const buf = encodeSeccompProgram(prog);
    expect(buf.length).toBe(prog.length * 8);
    expect(buf.readUInt16LE(0)).toBe(0x20);
    expect(buf.readUInt32LE(4)).toBe(4); // first load: the arch field
  });
});

describe('the seccomp filter (aarch64)', () => {
  const arm = buildSeccompProgram('arm64');
  it('refuses mount and keyctl by their asm-generic numbers and allows read', () => {
    expect(run(arm, { nr: 40, arch: ARM64 })).toBe(deny);
    expect(run(arm, { nr: 219, arch: ARM64 })).toBe(deny);
    expect(run(arm, { nr: 63, arch: ARM64 })).toBe(SECCOMP_RET_ALLOW);
    expect(run(arm, { nr: 63, arch: X64 })).toBe(SECCOMP_RET_KILL_PROCESS);
    expect(run(arm, { nr: 29, arch: ARM64, args: [0, 0x5412] })).toBe(deny);
  });
});
