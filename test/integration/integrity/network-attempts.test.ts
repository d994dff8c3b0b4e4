import { chmodSync, readdirSync, readFileSync, readlinkSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { IntegrityViolation } from '../../../src/protocol/integrity.js';
import { createSandboxProvider } from '../../../src/sandbox/index.js';
import type { Sandbox, SandboxProvider } from '../../../src/sandbox/sandbox.js';
import { testDriver } from '../sandbox/helpers.js';
import { missingTools, skipNote } from '../../helpers/system-tools.js';

/**
 * Network attempts out of a sandbox without network, with their address (#27): the root
 * observer puts a TUN device in the sandbox's network namespace as its default route and
 * answers each TCP SYN with a RST and each UDP datagram with an ICMP port unreachable, so an
 * attempt is refused at once (as before) and recorded with its destination, at the action
 * that made it. Real bwrap sandboxes, real sockets.
 */
const noObserver = process.getuid?.() !== 0 ? 'needs root (the observer sets up the TUN device)' : missingTools('python3');

let root: string;
let provider: SandboxProvider;
beforeAll(async () => {
  root = await mkdtemp(join(tmpdir(), 'integrity-net-'));
  chmodSync(root, 0o711);
  provider = createSandboxProvider({ driver: testDriver(), stateDir: root, hosts: 1 });
});
afterAll(async () => {
  await provider?.close();
  await rm(root, { recursive: true, force: true });
});

const py = (code: string): string => `python3 -c '${code}'`;
const net = (vs: IntegrityViolation[]) => vs.filter((v) => v.kind === 'network').map(({ turn, proto, address }) => ({ turn, proto, address }));

async function withSandbox(spec: Record<string, unknown>, fn: (sb: Sandbox) => Promise<void>): Promise<void> {
  const sb = await provider.create({ files: { 'a.txt': 'a\n' }, ...spec }, { rolloutId: `integrity-net-${Math.random().toString(36).slice(2)}` });
  try {
    await fn(sb);
  } finally {
    await sb.close();
  }
}

describe.skipIf(noObserver !== null || testDriver() === 'none')(`network attempts are recorded with their address${skipNote(noObserver)}`, () => {
  it('a TCP connect out is refused at once and reported at its turn with address and protocol', async () => {
    await withSandbox({}, async (sb) => {
      const start = await sb.integrity!({ op: 'start', protect: [] });
      expect(start.unobserved ?? []).toEqual([]);
      await sb.bash({ command: 'cat a.txt' });
      expect(net((await sb.integrity!({ op: 'observe', turn: 0 })).violations)).toEqual([]);
      const out = await sb.bash({ command: py('import socket\ntry: socket.create_connection(("203.0.113.7", 443), 20)\nexcept OSError as e: print("errno", e.errno)') });
      expect(out.output).toContain('errno 111');
      const o = await sb.integrity!({ op: 'observe', turn: 1 });
      expect(net(o.violations)).toEqual([{ turn: 1, proto: 'tcp', address: '203.0.113.7:443' }]);
      expect(o.violations[0]!.detail).toMatch(/1 TCP attempt to 203\.0\.113\.7:443 refused/);
    });
  });

  it('an IPv6 connect is reported with its bracketed address', async () => {
    await withSandbox({}, async (sb) => {
      await sb.integrity!({ op: 'start', protect: [] });
      const out = await sb.bash({ command: py('import socket\ntry: socket.create_connection(("2001:db8::7", 80), 20)\nexcept OSError as e: print("errno", e.errno)') });
      expect(out.output).toContain('errno 111');
      expect(net((await sb.integrity!({ op: 'observe', turn: 4 })).violations)).toEqual([{ turn: 4, proto: 'tcp', address: '[2001:db8::7]:80' }]);
    });
  });

  it('UDP datagrams are answered port-unreachable and reported, a DNS query with its name', async () => {
    await withSandbox({}, async (sb) => {
      await sb.integrity!({ op: 'start', protect: [] });
      // A connected UDP socket learns of the ICMP answer: its next recv fails with ECONNREFUSED.
      const udp = 'import socket\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ns.settimeout(20)\ns.connect(("198.51.100.9", 9999))\ns.send(b"x")\ntry: s.recv(10)\nexcept OSError as e: print("errno", e.errno)';
      const q = 'import socket, struct\nq = struct.pack("!HHHHHH", 1, 256, 1, 0, 0, 0) + b"\\x05pypi1\\x03org\\x00" + struct.pack("!HH", 1, 1)\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ns.sendto(q, ("198.51.100.53", 53))\ns.sendto(q, ("198.51.100.53", 53))';
      // A datagram over the MTU leaves in fragments: one attempt, not one per fragment.
      const big = 'import socket\nsocket.socket(socket.AF_INET6, socket.SOCK_DGRAM).sendto(b"x" * 4000, ("2001:db8::9", 7777))';
      const out = await sb.bash({ command: `${py(udp)}; ${py(q)}; ${py(big)}` });
      expect(out.output).toContain('errno 111');
      const o = await sb.integrity!({ op: 'observe', turn: 2 });
      expect(net(o.violations)).toEqual([
        { turn: 2, proto: 'udp', address: '198.51.100.9:9999' },
        { turn: 2, proto: 'udp', address: '198.51.100.53:53' },
        { turn: 2, proto: 'udp', address: '[2001:db8::9]:7777' },
      ]);
      expect(o.violations[1]!.detail).toMatch(/^2 UDP attempts to 198\.51\.100\.53:53 \(a DNS query for pypi1\.org\) refused/);
    });
  });

  it("bash's /dev/tcp and curl are refused and reported like any program", async () => {
    await withSandbox({}, async (sb) => {
      await sb.integrity!({ op: 'start', protect: [] });
      const out = await sb.bash({ command: "(echo > /dev/tcp/203.0.113.8/8080) 2>&1; echo rc=$?; if command -v curl >/dev/null; then curl -sS -m 20 http://203.0.113.9:81/ 2>&1; echo curl=$?; fi" });
      expect(out.output).toMatch(/Connection refused[\s\S]*rc=1/);
      const want = [{ turn: 0, proto: 'tcp', address: '203.0.113.8:8080' }];
      if (/curl=/.test(out.output)) {
        expect(out.output).toContain('curl=7'); // couldn't connect
        want.push({ turn: 0, proto: 'tcp', address: '203.0.113.9:81' });
      }
      expect(net((await sb.integrity!({ op: 'observe', turn: 0 })).violations)).toEqual(want);
    });
  });

  it('a flood is capped: at most 20 addresses per action, the rest counted, and the reading bounded by the packet budget', async () => {
    await withSandbox({}, async (sb) => {
      await sb.integrity!({ op: 'start', protect: [] });
      // UDP to 2,000 destinations as fast as the sandbox can send, for about a second.
      const flood = 'import socket, time\ns = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\nt = time.monotonic()\nn = 0\nwhile time.monotonic() - t < 1.0:\n  try: s.sendto(b"x", ("198.51.100.%d" % (n % 200 + 1), 1000 + n % 10)); n += 1\n  except OSError: pass\nprint("sent", n, "in", time.monotonic() - t)';
      const out = await sb.bash({ command: py(flood) });
      const [, sent, secs] = /sent (\d+) in ([\d.]+)/.exec(out.output)!;
      const o = await sb.integrity!({ op: 'observe', turn: 5 });
      const vs = o.violations.filter((v) => v.kind === 'network');
      const listed = vs.filter((v) => v.address);
      expect(listed).toHaveLength(20);
      expect(listed.every((v) => v.turn === 5 && v.proto === 'udp')).toBe(true);
      const summary = vs.find((v) => !v.address)!;
      expect(summary.detail).toMatch(/more attempts to destinations past the first 20/);
      const counted = (d: string) => Number(/^(\d+) UDP attempt/.exec(d)?.[1] ?? 0);
      const read = listed.reduce((a, v) => a + counted(v.detail), 0) + Number(/(\d+) more attempts/.exec(summary.detail)![1]);
      // 2,000 packets a second at most (the budget), and one queue (500) at the action's end.
      expect(read).toBeLessThanOrEqual(2000 * (Math.ceil(Number(secs)) + 1) + 500);
      // Every datagram is accounted for at this action: read, or dropped by the kernel and counted.
      const dropped = Number(/(\d+) packets? dropped unread/.exec(summary.detail)?.[1] ?? 0);
      if (read < Number(sent)) expect(summary.detail).toMatch(/dropped unread/);
      expect(read + dropped).toBeGreaterThanOrEqual(Number(sent));
      expect(read + dropped).toBeLessThanOrEqual(Number(sent) + 10);
      // A connect after the flood is still refused (once the budget's second is over) and seen at its own turn.
      const after = await sb.bash({ command: py('import socket\ntry: socket.create_connection(("203.0.113.77", 22), 20)\nexcept OSError as e: print("errno", e.errno)') });
      expect(after.output).toContain('errno 111');
      expect(net((await sb.integrity!({ op: 'observe', turn: 6 })).violations)).toEqual([{ turn: 6, proto: 'tcp', address: '203.0.113.77:22' }]);
    });
  });

  it('follows a shell restarted by exit into its fresh network namespace', async () => {
    await withSandbox({}, async (sb) => {
      await sb.integrity!({ op: 'start', protect: [] });
      // An attempt in the old shell, then `exit`: the new shell has a namespace of its own.
      const before = await sb.bash({ command: '(echo > /dev/tcp/203.0.113.10/80) 2>/dev/null; exit 3' });
      expect(before.exitCode).toBe(3);
      expect(net((await sb.integrity!({ op: 'observe', turn: 0 })).violations)).toEqual([{ turn: 0, proto: 'tcp', address: '203.0.113.10:80' }]);
      const after = await sb.bash({ command: '(echo > /dev/tcp/203.0.113.11/80) 2>&1' });
      expect(after.output).toMatch(/Connection refused/);
      const o = await sb.integrity!({ op: 'observe', turn: 1 });
      expect(net(o.violations)).toEqual([{ turn: 1, proto: 'tcp', address: '203.0.113.11:80' }]);
      expect(o.unobserved ?? []).toEqual([]);
    });
  });

  // `network: true` is slirp4netns's user-mode network: without it the case skips with the install line.
  const noSlirp = missingTools('slirp4netns');
  it.skipIf(noSlirp !== null)(`a sandbox with network: true keeps its user-mode network: no TUN device, nothing reported${skipNote(noSlirp)}`, async () => {
    await withSandbox({ network: true }, async (sb) => {
      const start = await sb.integrity!({ op: 'start', protect: [] });
      expect(start.unobserved ?? []).toEqual([]);
      const out = await sb.bash({ command: 'cut -d: -f1 /proc/net/dev | tail -n +3 | tr -d " " | sort | tr "\n" " "' });
      expect(out.output.trim()).toBe('lo tap0');
      expect((await sb.integrity!({ op: 'observe', turn: 0 })).violations).toEqual([]);
    });
  });

  it('a sandbox without network sees the TUN device as its default route, and loopback stays its own', async () => {
    await withSandbox({}, async (sb) => {
      await sb.integrity!({ op: 'start', protect: [] });
      // The unshare driver leaves loopback down: 127.0.0.1 then takes the default route, and is still not reported.
      const srv = 'import socket\ntry:\n  l = socket.socket()\n  l.bind(("127.0.0.1", 0))\n  l.listen()\n  c = socket.create_connection(l.getsockname(), 5)\n  print("local ok")\nexcept OSError as e:\n  socket.socket().connect_ex(("127.0.0.1", 8000))\n  print("loopback down", e.errno)';
      const out = await sb.bash({ command: `cut -d: -f1 /proc/net/dev | tail -n +3 | tr -d " " | sort | tr "\\n" " "; echo; ${py(srv)}` });
      expect(out.output).toMatch(/^lo rollout0 \n/m);
      expect(out.output).toContain(testDriver() === 'unshare' ? 'loopback down' : 'local ok');
      expect((await sb.integrity!({ op: 'observe', turn: 0 })).violations).toEqual([]);
    });
  });
});

/** The TUN fds held by the observers this test process started (its descendants' python3 helpers). */
function observerTunFds(): number {
  const parent = new Map<number, number>();
  for (const name of readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = readFileSync(`/proc/${name}/stat`, 'utf8');
      parent.set(Number(name), Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]));
    } catch {
      // gone
    }
  }
  const mine = (pid: number): boolean => {
    for (let p = parent.get(pid); p !== undefined && p > 1; p = parent.get(p)) if (p === process.pid) return true;
    return false;
  };
  let n = 0;
  for (const pid of parent.keys()) {
    if (!mine(pid)) continue;
    try {
      if (!readFileSync(`/proc/${pid}/cmdline`, 'utf8').startsWith('/usr/bin/python3\0-I\0-S\0-c\0')) continue;
      for (const fd of readdirSync(`/proc/${pid}/fd`)) if (readlinkSync(`/proc/${pid}/fd/${fd}`) === '/dev/net/tun') n++;
    } catch {
      // gone
    }
  }
  return n;
}

describe.skipIf(noObserver !== null || testDriver() === 'none')(`the TUN device's lifetime${skipNote(noObserver)}`, () => {
  it("is closed with its sandbox, so the sandbox's network namespace goes too", async () => {
    const before = observerTunFds();
    const sb = await provider.create({ files: { 'a.txt': 'a\n' } }, { rolloutId: 'integrity-net-lifetime' });
    try {
      await sb.integrity!({ op: 'start', protect: [] });
      expect(observerTunFds()).toBe(before + 1);
      // A second start (a restarted monitor) replaces the device rather than adding one.
      await sb.integrity!({ op: 'start', protect: [] });
      expect(observerTunFds()).toBe(before + 1);
      await sb.bash({ command: '(echo > /dev/tcp/203.0.113.5/25) 2>/dev/null' });
      expect(net((await sb.integrity!({ op: 'observe', turn: 1 })).violations)).toEqual([{ turn: 1, proto: 'tcp', address: '203.0.113.5:25' }]);
    } finally {
      await sb.close();
    }
    await expect.poll(observerTunFds, { timeout: 20_000 }).toBe(before);
  });
});
