import fs from 'node:fs';
import path from 'node:path';

/**
 * The sandbox's seccomp filter: a classic-BPF program (the format `bwrap --seccomp FD` and
 * `prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER)` take) that refuses the syscalls a contained
 * process never needs and that widen the kernel's attack surface: mounts, ptrace, the kernel
 * keyring, bpf, perf, new namespaces, module and kexec loading, file handles, userfaultfd,
 * personality flags beyond the harmless ones, io_uring and clone3 (whose flags a filter cannot
 * inspect). Everything else is allowed: this is a deny list on top of dropped capabilities and an
 * unprivileged uid, not the only wall.
 *
 * Layout of the program:
 *   - a foreign architecture (an i386 `int 0x80` from a 64-bit process, or any ABI whose numbers
 *     we did not check) kills the process: the deny list is keyed by this arch's numbers;
 *   - on x86_64, x32 syscalls (nr ≥ 0x40000000, the same calls under other numbers) are refused;
 *   - each denied nr → EPERM; clone3 and io_uring → ENOSYS, so libcs and libuv fall back;
 *   - clone with any CLONE_NEW* flag → EPERM; personality other than the values glibc,
 *     `setarch -R`-free tools and Python use → EPERM;
 *   - ioctl TIOCSTI and TIOCLINUX (their low 32 bits: the kernel's `cmd` is an unsigned int) →
 *     EPERM: TIOCSTI types into the terminal, and a sandbox's terminal is the runtime's shell —
 *     a harness's child could otherwise queue commands for the shell the runtime talks to;
 *   - otherwise ALLOW.
 */

/** Syscalls refused with EPERM, by name (the same list for every architecture). */
export const DENIED_SYSCALLS = [
  // mounts and the filesystem tree
  'mount', 'umount2', 'pivot_root', 'chroot', 'fsopen', 'fsconfig', 'fsmount', 'fspick', 'open_tree', 'move_mount', 'mount_setattr',
  'swapon', 'swapoff', 'quotactl', 'quotactl_fd', 'nfsservctl', 'acct',
  // other processes
  'ptrace', 'process_vm_readv', 'process_vm_writev', 'process_madvise', 'kcmp', 'pidfd_getfd', 'migrate_pages', 'move_pages',
  // kernel keyring
  'add_key', 'request_key', 'keyctl',
  // kernel attack surface
  'bpf', 'perf_event_open', 'userfaultfd', 'fanotify_init', 'open_by_handle_at', 'name_to_handle_at', 'lookup_dcookie',
  // namespaces
  'unshare', 'setns',
  // the machine itself
  'reboot', 'kexec_load', 'kexec_file_load', 'init_module', 'finit_module', 'delete_module', 'create_module', 'query_module', 'get_kernel_syms',
  'syslog', 'settimeofday', 'clock_settime', 'clock_adjtime', 'adjtimex', 'iopl', 'ioperm', 'uselib', '_sysctl', 'vhangup', 'sethostname', 'setdomainname',
] as const;

/** Syscalls refused with ENOSYS ("not implemented"), so callers fall back to older ones. */
export const ENOSYS_SYSCALLS = ['clone3', 'io_uring_setup', 'io_uring_enter', 'io_uring_register'] as const;

type Name = (typeof DENIED_SYSCALLS)[number] | (typeof ENOSYS_SYSCALLS)[number] | 'clone' | 'personality' | 'ioctl';

/** Syscall numbers per architecture; a name missing on an arch does not exist there. */
const NUMBERS: Record<SeccompArch, Partial<Record<Name, number>>> = {
  x64: {
    mount: 165, umount2: 166, pivot_root: 155, chroot: 161, fsopen: 430, fsconfig: 431, fsmount: 432, fspick: 433, open_tree: 428, move_mount: 429, mount_setattr: 442,
    swapon: 167, swapoff: 168, quotactl: 179, quotactl_fd: 443, nfsservctl: 180, acct: 163,
    ptrace: 101, process_vm_readv: 310, process_vm_writev: 311, process_madvise: 440, kcmp: 312, pidfd_getfd: 438, migrate_pages: 256, move_pages: 279,
    add_key: 248, request_key: 249, keyctl: 250,
    bpf: 321, perf_event_open: 298, userfaultfd: 323, fanotify_init: 300, open_by_handle_at: 304, name_to_handle_at: 303, lookup_dcookie: 212,
    unshare: 272, setns: 308,
    reboot: 169, kexec_load: 246, kexec_file_load: 320, init_module: 175, finit_module: 313, delete_module: 176, create_module: 174, query_module: 178, get_kernel_syms: 177,
    syslog: 103, settimeofday: 164, clock_settime: 227, clock_adjtime: 305, adjtimex: 159, iopl: 172, ioperm: 173, uselib: 134, _sysctl: 156, vhangup: 153, sethostname: 170, setdomainname: 171,
    clone3: 435, io_uring_setup: 425, io_uring_enter: 426, io_uring_register: 427,
    clone: 56, personality: 135, ioctl: 16,
  },
  // asm-generic numbers (aarch64 has no legacy calls such as iopl or create_module).
  arm64: {
    mount: 40, umount2: 39, pivot_root: 41, chroot: 51, fsopen: 430, fsconfig: 431, fsmount: 432, fspick: 433, open_tree: 428, move_mount: 429, mount_setattr: 442,
    swapon: 224, swapoff: 225, quotactl: 60, quotactl_fd: 443, nfsservctl: 42, acct: 89,
    ptrace: 117, process_vm_readv: 270, process_vm_writev: 271, process_madvise: 440, kcmp: 272, pidfd_getfd: 438, migrate_pages: 238, move_pages: 239,
    add_key: 217, request_key: 218, keyctl: 219,
    bpf: 280, perf_event_open: 241, userfaultfd: 282, fanotify_init: 262, open_by_handle_at: 265, name_to_handle_at: 264, lookup_dcookie: 18,
    unshare: 97, setns: 268,
    reboot: 142, kexec_load: 104, kexec_file_load: 294, init_module: 105, finit_module: 273, delete_module: 106,
    syslog: 116, settimeofday: 170, clock_settime: 112, clock_adjtime: 266, adjtimex: 171, vhangup: 58, sethostname: 161, setdomainname: 162,
    clone3: 435, io_uring_setup: 425, io_uring_enter: 426, io_uring_register: 427,
    clone: 220, personality: 92, ioctl: 29,
  },
};

/** Architectures the generator knows (Node's `process.arch` names). */
export type SeccompArch = 'x64' | 'arm64';

const AUDIT_ARCH: Record<SeccompArch, number> = { x64: 0xc000003e, arm64: 0xc00000b7 };
const X32_SYSCALL_BIT = 0x40000000;

/** CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET (NEWTIME is clone3-only). */
export const CLONE_NAMESPACE_FLAGS = 0x7e020000;
/** personality() values allowed: query (0xffffffff), PER_LINUX, PER_LINUX32, UNAME26 variants. */
export const ALLOWED_PERSONALITIES = [0x0, 0x8, 0x20000, 0x20008, 0xffffffff] as const;
/** ioctl requests refused: TIOCSTI (push a byte into the terminal's input) and TIOCLINUX. */
export const DENIED_IOCTLS = [0x5412, 0x541c] as const;

// seccomp return values and errno numbers (generic Linux).
export const SECCOMP_RET_KILL_PROCESS = 0x80000000;
export const SECCOMP_RET_ERRNO = 0x00050000;
export const SECCOMP_RET_ALLOW = 0x7fff0000;
export const EPERM = 1;
export const ENOSYS = 38;

// Classic BPF opcodes used here.
const LD_W_ABS = 0x20; // BPF_LD | BPF_W | BPF_ABS
const JEQ_K = 0x15; // BPF_JMP | BPF_JEQ | BPF_K
const JGE_K = 0x35; // BPF_JMP | BPF_JGE | BPF_K
const JSET_K = 0x45; // BPF_JMP | BPF_JSET | BPF_K
const RET_K = 0x06; // BPF_RET | BPF_K

// struct seccomp_data offsets: nr (u32), arch (u32), instruction_pointer (u64), args[6] (u64).
// args[0]'s low 32 bits sit at 16 on little-endian machines (both arches here).
const OFF_NR = 0;
const OFF_ARCH = 4;
const OFF_ARG0_LO = 16;
const OFF_ARG1_LO = 24;

/** One classic-BPF instruction (struct sock_filter). */
export interface BpfInsn {
  code: number;
  jt: number;
  jf: number;
  k: number;
}

type Target = 'allow' | 'deny' | 'enosys' | 'kill' | 'clone' | 'personality' | 'ioctl';
interface Pending {
  code: number;
  k: number;
  jt?: Target;
  jf?: Target;
}

/** True when the generator knows `arch` (Node's `process.arch`). */
export function seccompSupported(arch: string = process.arch): arch is SeccompArch {
  return arch === 'x64' || arch === 'arm64';
}

/**
 * Builds the filter for `arch` as a list of instructions.
 * @throws Error for an architecture the generator does not know, or a jump past 255
 *   instructions (classic BPF's limit; a longer deny list needs a different layout).
 */
export function buildSeccompProgram(arch: SeccompArch = process.arch as SeccompArch): BpfInsn[] {
  if (!seccompSupported(arch)) throw new Error(`no seccomp filter for architecture ${arch}`);
  const nr = NUMBERS[arch];
  const main: Pending[] = [
    { code: LD_W_ABS, k: OFF_ARCH },
    { code: JEQ_K, k: AUDIT_ARCH[arch], jf: 'kill' },
    { code: LD_W_ABS, k: OFF_NR },
  ];
  if (arch === 'x64') main.push({ code: JGE_K, k: X32_SYSCALL_BIT, jt: 'deny' });
  for (const name of DENIED_SYSCALLS) {
    const n = nr[name];
    if (n !== undefined) main.push({ code: JEQ_K, k: n, jt: 'deny' });
  }
  for (const name of ENOSYS_SYSCALLS) main.push({ code: JEQ_K, k: nr[name]!, jt: 'enosys' });
  main.push({ code: JEQ_K, k: nr.clone!, jt: 'clone' });
  main.push({ code: JEQ_K, k: nr.personality!, jt: 'personality' });
  main.push({ code: JEQ_K, k: nr.ioctl!, jt: 'ioctl' });
  main.push({ code: RET_K, k: SECCOMP_RET_ALLOW });

  const blocks: Record<Exclude<Target, 'allow'>, Pending[]> & { allow: Pending[] } = {
    clone: [
      { code: LD_W_ABS, k: OFF_ARG0_LO },
      { code: JSET_K, k: CLONE_NAMESPACE_FLAGS, jt: 'deny', jf: 'allow' },
    ],
    personality: [
      { code: LD_W_ABS, k: OFF_ARG0_LO },
      ...ALLOWED_PERSONALITIES.map((p): Pending => ({ code: JEQ_K, k: p, jt: 'allow' })),
      { code: RET_K, k: SECCOMP_RET_ERRNO | EPERM },
    ],
    ioctl: [
      { code: LD_W_ABS, k: OFF_ARG1_LO },
      ...DENIED_IOCTLS.map((c): Pending => ({ code: JEQ_K, k: c, jt: 'deny' })),
      { code: RET_K, k: SECCOMP_RET_ALLOW },
    ],
    deny: [{ code: RET_K, k: SECCOMP_RET_ERRNO | EPERM }],
    enosys: [{ code: RET_K, k: SECCOMP_RET_ERRNO | ENOSYS }],
    kill: [{ code: RET_K, k: SECCOMP_RET_KILL_PROCESS }],
    allow: [{ code: RET_K, k: SECCOMP_RET_ALLOW }],
  };
  const order: Target[] = ['clone', 'personality', 'ioctl', 'deny', 'enosys', 'kill', 'allow'];
  const all: Pending[] = [...main];
  const at = {} as Record<Target, number>;
  for (const t of order) {
    at[t] = all.length;
    all.push(...blocks[t]);
  }
  return all.map((p, i) => {
    const rel = (t: Target | undefined): number => {
      if (t === undefined) return 0;
      const off = at[t] - i - 1;
      if (off < 0 || off > 255) throw new Error(`seccomp jump out of range (${off}) at instruction ${i}`);
      return off;
    };
    return { code: p.code, jt: rel(p.jt), jf: rel(p.jf), k: p.k >>> 0 };
  });
}

/** The program as bytes: 8 per instruction (u16 code, u8 jt, u8 jf, u32 k), native (little) endian. */
export function encodeSeccompProgram(prog: BpfInsn[]): Buffer {
  const buf = Buffer.alloc(prog.length * 8);
  prog.forEach((ins, i) => {
    buf.writeUInt16LE(ins.code, i * 8);
    buf.writeUInt8(ins.jt, i * 8 + 2);
    buf.writeUInt8(ins.jf, i * 8 + 3);
    buf.writeUInt32LE(ins.k, i * 8 + 4);
  });
  return buf;
}

/**
 * Writes this machine's filter to `<dir>/seccomp.bpf` (mode 0644: sandboxed processes may read
 * it, it holds no secret) and returns the path, or null on an architecture the generator does
 * not know (the caller then runs without a filter and says so).
 */
export function writeSeccompFilter(dir: string): string | null {
  if (!seccompSupported()) return null;
  const file = path.join(dir, 'seccomp.bpf');
  fs.writeFileSync(file, encodeSeccompProgram(buildSeccompProgram()), { mode: 0o644 });
  return file;
}

/**
 * Python that installs a filter file on the calling process: no_new_privs, then
 * `prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &sock_fprog)`. Used where no bwrap loads it for
 * us (the Python REPL entered with nsenter, the unshare driver's shell). Fails closed: any error
 * raises before user code runs.
 */
export const PY_SECCOMP_LOADER = String.raw`
def _rollout_seccomp(path):
    import ctypes, ctypes.util
    data = open(path, 'rb').read()
    if not data or len(data) % 8:
        raise SystemExit('bad seccomp filter ' + path)
    class Fprog(ctypes.Structure):
        _fields_ = [('len', ctypes.c_ushort), ('filter', ctypes.c_char_p)]
    libc = ctypes.CDLL(ctypes.util.find_library('c') or 'libc.so.6', use_errno=True)
    libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong, ctypes.c_ulong]
    if libc.prctl(38, 1, None, 0, 0) != 0:
        raise SystemExit('PR_SET_NO_NEW_PRIVS failed: errno %d' % ctypes.get_errno())
    buf = ctypes.create_string_buffer(data, len(data))
    prog = Fprog(len(data) // 8, ctypes.cast(buf, ctypes.c_char_p))
    if libc.prctl(22, 2, ctypes.addressof(prog), 0, 0) != 0:
        raise SystemExit('PR_SET_SECCOMP failed: errno %d' % ctypes.get_errno())
`;
