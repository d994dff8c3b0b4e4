/**
 * The source of the process and secret-read observer (#27), run by {@link ProcessObserver} as
 * `/usr/bin/python3 -I -S -c SOURCE` as root on the sandbox's host: Node has no binding for the
 * kernel's process-events connector nor for fanotify, and Python reaches both with its standard
 * library (a netlink socket; fanotify_init/fanotify_mark through ctypes).
 *
 * - Processes: the process-events connector (netlink, CN_IDX_PROC, root) multicasts every fork,
 *   exec and exit of the machine as it happens. A pid belongs to a watched sandbox when its
 *   parent did (fork events), or else when its pids cgroup is the sandbox's; on exec its command
 *   line is read from /proc at once (the event comes after the new image is in place). A process
 *   that exits before that read is reported with `argv: null`.
 * - Secret reads: fanotify (notification class, inode marks with FAN_EVENT_ON_CHILD) on every
 *   directory holding a secret path: each open of a file in it, by any process, queues an event
 *   with the opener's pid and an fd of the file; a pid outside the sandbox's cgroup (the host
 *   itself) is skipped.
 * - Network attempts of a sandbox without network: in its network namespace (setns from here,
 *   nothing inside the sandbox) a TUN device is the default route (IPv4 and IPv6, set up over
 *   rtnetlink); the helper answers each TCP SYN with a RST and each UDP datagram with an ICMP port
 *   unreachable (so the attempt is refused at once) and records its destination. At most
 *   NET_PACKET_BUDGET packets a second are read (all devices together); past it the kernel's
 *   queue holds TUN_QUEUE packets and drops the rest, which a drain counts (the device's
 *   tx_dropped). The device is closed on unwatch, on a new namespace (`net`) and when the
 *   sandbox's cgroup is gone (checked every 5 s): an open TUN fd keeps its namespace alive.
 *
 * Both queues are filled synchronously by the kernel, so when a `drain` request arrives, the
 * helper first empties them and only then answers: everything the action did before the request
 * is in the answer. Protocol: one JSON object per line each way, answers in request order.
 *   {"op":"watch","id":S,"cgroup":"/rollout/S","dirs":[abs dirs],"roots":[host workspace],"inside":"/workspace","execfs":[paths],"netPid":n?}
 *     → {"ok":true,"marked":n,"errors":[…],"net":true | "netError":why}
 *   {"op":"net","id":S,"netPid":n} → {"ok":true,"net":true | "netError":why}   (the device moves to pid n's namespace)
 *   {"op":"drain","id":S} → {"execs":[{"pid":n,"argv":[…]|null}],"reads":[workspace-relative paths],"lost":n,
 *     "net":[{"proto","address","count","name"}],"netMore":n,"netDropped":n,"netCapped":bool}   (net* when the device is up)
 *   {"op":"unwatch","id":S} → {"ok":true}
 * On start it prints {"ready":true,"exec":bool,"reads":bool,"why":[…]} (what it could open).
 * It exits when its stdin closes (its host process ended).
 */
/** Distinct destinations the helper keeps per sandbox between two drains; attempts to more are counted. */
export const MAX_NET_ADDRESSES = 20;
/** Packets the helper reads a second from all its TUN devices together, besides one queue's worth at each drain. */
export const NET_PACKET_BUDGET = 2000;

export const OBSERVER_SOURCE = String.raw`
import ctypes, fcntl, json, os, select, socket, struct, sys, time

why = []
watches = {}      # id -> {"cgroup": str, "roots": [str], "inside": str, "execs": [], "paths": [], "reads": [], "lost": 0}
owner = {}        # tgid -> watch id
exited = []       # tgids that exited: forgotten after the fanotify queue is read (its events may name them)
MAX_ITEMS = 2000

def cgroup_of(pid):
    try:
        with open('/proc/%d/cgroup' % pid) as f:
            for line in f:
                parts = line.rstrip('\n').split(':', 2)
                if len(parts) == 3 and 'pids' in parts[1].split(','):
                    return parts[2]
    except OSError:
        return None
    return None

def watch_of_cgroup(cg):
    if cg is None:
        return None
    for wid, w in watches.items():
        if cg == w['cgroup'] or cg.startswith(w['cgroup'] + '/'):
            return wid
    return None

def cmdline(pid):
    try:
        with open('/proc/%d/cmdline' % pid, 'rb') as f:
            raw = f.read(65536)
    except OSError:
        return None
    if not raw:
        return None
    return [a.decode('utf-8', 'replace') for a in raw.rstrip(b'\0').split(b'\0')]

def push(w, key, item):
    if len(w[key]) < MAX_ITEMS:
        w[key].append(item)
    else:
        w['lost'] += 1

# ---- process events connector ----
nl = None
try:
    nl = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, 11)  # NETLINK_CONNECTOR
    try:
        nl.setsockopt(socket.SOL_SOCKET, 33, 8 << 20)  # SO_RCVBUFFORCE
    except OSError:
        pass
    nl.bind((os.getpid(), 1))  # CN_IDX_PROC
    cn = struct.pack('=IIIIHHI', 1, 1, 0, 0, 4, 0, 1)  # cb_id {CN_IDX_PROC, CN_VAL_PROC}, seq, ack, len, flags, PROC_CN_MCAST_LISTEN
    nl.send(struct.pack('=IHHII', 16 + len(cn), 3, 0, 0, os.getpid()) + cn)
    nl.setblocking(False)
except OSError as e:
    why.append('process events connector: %s' % e)
    nl = None

def read_proc_events():
    while True:
        try:
            data = nl.recv(65536)
        except BlockingIOError:
            return
        except OSError as e:  # ENOBUFS: the kernel dropped events
            for w in watches.values():
                w['lost'] += 1
            continue
        off = 0
        while off + 16 <= len(data):
            nlen = struct.unpack_from('=I', data, off)[0]
            if nlen < 16:
                break
            base = off + 16 + 20
            if base + 16 <= off + nlen:
                what = struct.unpack_from('=I', data, base)[0]
                ev = base + 16
                if what == 1:  # FORK
                    ppid, ptgid, cpid, ctgid = struct.unpack_from('=IIII', data, ev)
                    wid = owner.get(ptgid)
                    if wid is not None and cpid == ctgid:
                        owner[ctgid] = wid
                elif what == 2:  # EXEC
                    pid, tgid = struct.unpack_from('=II', data, ev)
                    wid = owner.get(tgid)
                    if wid is None and watches:
                        wid = watch_of_cgroup(cgroup_of(tgid))
                        if wid is not None:
                            owner[tgid] = wid
                    if wid is not None and wid in watches:
                        push(watches[wid], 'execs', {'pid': tgid, 'argv': cmdline(tgid)})
                elif what == 0x80000000:  # EXIT
                    pid, tgid = struct.unpack_from('=II', data, ev)
                    if pid == tgid:
                        exited.append(tgid)
            off += (nlen + 3) & ~3

# ---- fanotify ----
fan = -1
libc = None
try:
    libc = ctypes.CDLL(None, use_errno=True)
    libc.fanotify_init.argtypes = [ctypes.c_uint, ctypes.c_uint]
    libc.fanotify_mark.argtypes = [ctypes.c_int, ctypes.c_uint, ctypes.c_uint64, ctypes.c_int, ctypes.c_char_p]
    fan = libc.fanotify_init(0x1 | 0x2, os.O_RDONLY | getattr(os, 'O_LARGEFILE', 0) | os.O_CLOEXEC)  # FAN_CLOEXEC|FAN_NONBLOCK, FAN_CLASS_NOTIF
    if fan < 0:
        why.append('fanotify_init: %s' % os.strerror(ctypes.get_errno()))
except (OSError, AttributeError) as e:
    why.append('fanotify: %s' % e)
    fan = -1

FAN_OPEN = 0x20
FAN_OPEN_EXEC = 0x1000
FAN_ON_CHILD = 0x08000000
LOADER = ('/ld-linux', '/ld-musl', '/ld64.so')
FAN_Q_OVERFLOW = 0x4000
META = struct.Struct('=IBBHQii')

def read_fan_events():
    while True:
        try:
            data = os.read(fan, 65536)
        except BlockingIOError:
            return
        off = 0
        while off + META.size <= len(data):
            elen, vers, _r, mlen, mask, fd, pid = META.unpack_from(data, off)
            if elen < META.size:
                return
            off += elen
            if mask & FAN_Q_OVERFLOW:
                for w in watches.values():
                    w['lost'] += 1
            if fd < 0:
                continue
            try:
                p = os.readlink('/proc/self/fd/%d' % fd)
            except OSError:
                p = None
            os.close(fd)
            if p is None or pid == os.getppid():
                continue
            wid = owner.get(pid)
            gone = False
            if wid is None and watches:
                cg = cgroup_of(pid)
                gone = cg is None
                wid = watch_of_cgroup(cg)
            if mask & FAN_OPEN_EXEC:
                # The file an execve opened: the program, then a script's interpreter, then the ELF loader.
                if wid is not None and wid in watches and not any(x in p for x in LOADER):
                    push(watches[wid], 'paths', [pid, p])
            if mask & FAN_OPEN:
                # The path as the opener sees it: the host's path, or the workspace's path inside the sandbox.
                # A live process outside every sandbox (the host itself) is not the agent; one already gone may be.
                cands = [wid] if wid is not None else [k for k, w in watches.items() if any(p.startswith(r + '/') for r in w['roots'])] if gone else []
                for k in cands:
                    w = watches.get(k)
                    if w is None:
                        continue
                    for r in w['roots'] + [w['inside']]:
                        if p.startswith(r + '/'):
                            push(w, 'reads', p[len(r) + 1:])
                            break
                    break

# ---- network attempts: a TUN device as the default route of a sandbox without network ----
CLONE_NEWNET = 0x40000000
TUN_DEV = 'rollout%d'
SRC4 = socket.inet_aton('192.0.0.8')                          # RFC 7600's IPv4 dummy address
SRC6 = socket.inet_pton(socket.AF_INET6, 'fd72:6f6c:6c6f::2')  # a unique-local address of ours
LOOPBACK6 = socket.inet_pton(socket.AF_INET6, '::1')
NET_BUDGET = ${NET_PACKET_BUDGET}   # packets read per second, all sandboxes together: a flood is left to the kernel's queue
MAX_ADDRS = ${MAX_NET_ADDRESSES}      # distinct addresses kept per sandbox between two drains; more are counted
TUN_QUEUE = 500     # the device's queue (txqueuelen): what a drain reads past the budget, at most
tuns = {}           # tun fd -> watch id
budget = [NET_BUDGET, 0.0]  # packets left in this window, the window's end (monotonic)

def nl_call(s, typ, body, attrs=(), flags=0x400 | 0x200):
    # One rtnetlink request (NLM_F_REQUEST|NLM_F_ACK|flags), its answer's data; raises the kernel's error.
    payload = body
    for t, v in attrs:
        a = struct.pack('=HH', 4 + len(v), t) + v
        payload += a + b'\0' * (-len(a) % 4)
    s.send(struct.pack('=IHHII', 16 + len(payload), typ, 1 | 4 | flags, 1, 0) + payload)
    out = b''
    while True:
        data = s.recv(65536)
        off = 0
        while off + 16 <= len(data):
            ln, t = struct.unpack_from('=IH', data, off)
            if ln < 16:
                return out
            if t == 2:  # NLMSG_ERROR: 0 is the ack
                err = struct.unpack_from('=i', data, off + 16)[0]
                if err != 0:
                    raise OSError(-err, 'rtnetlink %d: %s' % (typ, os.strerror(-err)))
                return out
            out += data[off + 16:off + ln]
            off += (ln + 3) & ~3

def net_attach(pid):
    # In the network namespace of pid: a TUN device, up, with a source address per family and the
    # default routes through it. Returns (tun fd, rtnetlink socket in that namespace, ifindex).
    if libc is None:
        raise OSError(0, 'no libc through ctypes')
    if not os.path.exists('/dev/net/tun'):
        raise OSError(0, 'no /dev/net/tun (the tun module is not loaded)')
    libc.setns.argtypes = [ctypes.c_int, ctypes.c_int]
    home = os.open('/proc/self/ns/net', os.O_RDONLY | os.O_CLOEXEC)
    tun, rt = -1, None
    try:
        target = os.open('/proc/%d/ns/net' % pid, os.O_RDONLY | os.O_CLOEXEC)
        try:
            if os.fstat(target).st_ino == os.fstat(home).st_ino:
                raise OSError(0, "the sandbox shares this host's network namespace")
            if libc.setns(target, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), 'setns: %s' % os.strerror(ctypes.get_errno()))
        finally:
            os.close(target)
        try:
            # The kernel's own IPv6 chatter (address checks, router solicitations) is not needed on it.
            for k in ('accept_dad', 'accept_ra', 'router_solicitations'):
                try:
                    with open('/proc/sys/net/ipv6/conf/default/' + k, 'w') as f:
                        f.write('0')
                except OSError:
                    pass
            tun = os.open('/dev/net/tun', os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
            ifr = fcntl.ioctl(tun, 0x400454ca, struct.pack('16sH22x', TUN_DEV.encode(), 0x0001 | 0x1000))  # TUNSETIFF: IFF_TUN|IFF_NO_PI
            idx = socket.if_nametoindex(ifr[:16].rstrip(b'\0').decode())
            rt = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW | socket.SOCK_CLOEXEC, 0)
            rt.bind((0, 0))
            nl_call(rt, 16, struct.pack('=BxHiII', 0, 0, idx, 1, 1), [(13, struct.pack('=I', TUN_QUEUE))], 0)  # RTM_NEWLINK: IFF_UP, IFLA_TXQLEN
            nl_call(rt, 20, struct.pack('=BBBBI', socket.AF_INET, 32, 0, 0, idx), [(2, SRC4), (1, SRC4)])  # RTM_NEWADDR
            nl_call(rt, 24, struct.pack('=BBBBBBBBI', socket.AF_INET, 0, 0, 0, 254, 4, 253, 1, 0), [(4, struct.pack('=i', idx))])  # RTM_NEWROUTE default, scope link
            # Loopback never takes the default route: where lo is down (the unshare driver) it stays unreachable, as before.
            # Not tied to the device, so it outlives it: replaced, not added, when a monitor restarts (NLM_F_CREATE|NLM_F_REPLACE).
            nl_call(rt, 24, struct.pack('=BBBBBBBBI', socket.AF_INET, 8, 0, 0, 254, 4, 0, 7, 0), [(1, socket.inet_aton('127.0.0.0'))], 0x400 | 0x100)  # RTN_UNREACHABLE
            try:
                nl_call(rt, 20, struct.pack('=BBBBI', socket.AF_INET6, 128, 0x02, 0, idx), [(1, SRC6), (8, struct.pack('=I', 0x02))])  # IFA_F_NODAD
                nl_call(rt, 24, struct.pack('=BBBBBBBBI', socket.AF_INET6, 0, 0, 0, 254, 4, 0, 1, 0), [(4, struct.pack('=i', idx))])
                nl_call(rt, 24, struct.pack('=BBBBBBBBI', socket.AF_INET6, 128, 0, 0, 254, 4, 0, 7, 0), [(1, LOOPBACK6)], 0x400 | 0x100)
            except OSError:
                pass  # IPv6 disabled in the namespace: nothing to route
        finally:
            if libc.setns(home, CLONE_NEWNET) != 0:
                # Never stay in the sandbox's namespace.
                os._exit(3)
    except OSError as e:
        if tun >= 0:
            os.close(tun)
        if rt is not None:
            rt.close()
        raise OSError(0, '%s' % (e.strerror or e))
    finally:
        os.close(home)
    return tun, rt, idx

def net_detach(w):
    n = w.get('net')
    if n is None:
        return
    w['net'] = None
    tuns.pop(n['fd'], None)
    try:
        os.close(n['fd'])  # a non-persistent TUN device is deleted with its last fd: the routes go with it
    except OSError:
        pass
    n['rt'].close()

def tx_dropped(n):
    # Packets the kernel dropped at the device's queue (left unread under a flood): IFLA_STATS64's tx_dropped.
    try:
        data = nl_call(n['rt'], 18, struct.pack('=BxHiII', 0, 0, n['idx'], 0, 0), (), 0)
    except OSError:
        return 0
    off = 16
    while off + 4 <= len(data):
        ln, t = struct.unpack_from('=HH', data, off)
        if ln < 4:
            break
        if t == 23 and ln >= 4 + 64:
            return struct.unpack_from('=8Q', data, off + 4)[7]
        off += (ln + 3) & ~3
    return 0

def csum(b):
    if len(b) % 2:
        b += b'\0'
    s = sum(struct.unpack('!%dH' % (len(b) // 2), b))
    s = (s & 0xffff) + (s >> 16)
    s = (s & 0xffff) + (s >> 16)
    return (~s) & 0xffff

def l4sum(v6, src, dst, proto, seg):
    ph = src + dst + (struct.pack('!I3xB', len(seg), proto) if v6 else struct.pack('!xBH', proto, len(seg)))
    return csum(ph + seg)

def ip_packet(v6, src, dst, proto, seg):
    if v6:
        return struct.pack('!IHBB', 6 << 28, len(seg), proto, 64) + src + dst + seg
    h = struct.pack('!BBHHHBBH', 0x45, 0, 20 + len(seg), 0, 0x4000, 64, proto, 0) + src + dst
    return h[:10] + struct.pack('!H', csum(h)) + h[12:] + seg

def with_sum(seg, at, v6, src, dst, proto):
    return seg[:at] + struct.pack('!H', l4sum(v6, src, dst, proto, seg)) + seg[at + 2:]

def dns_name(q):
    # The first question's name of a DNS query, or None.
    out, off = [], 12
    while off < len(q) and len(out) < 128:
        ln = q[off]
        if ln == 0:
            return '.'.join(out) or '.'
        if ln > 63 or off + 1 + ln > len(q):
            return None
        out.append(q[off + 1:off + 1 + ln].decode('ascii', 'replace'))
        off += 1 + ln
    return None

def record(n, proto, v6, dst, port, name=None):
    if dst[0] == 127 if not v6 else dst == LOOPBACK6:
        return  # the sandbox's own loopback (down under the unshare driver, so routed here): not the network
    a = socket.inet_ntop(socket.AF_INET6 if v6 else socket.AF_INET, dst)
    addr = a if port is None else ('[%s]:%d' % (a, port) if v6 else '%s:%d' % (a, port))
    key = (proto, addr, name)  # a resolver's queries: one entry per name asked
    e = n['seen'].get(key)
    if e is not None:
        e['count'] += 1
    elif len(n['seen']) < MAX_ADDRS:
        n['seen'][key] = {'proto': proto, 'address': addr, 'count': 1, 'name': name}
    else:
        n['more'] += 1

def on_packet(fd, n, p):
    # Each TCP SYN is answered by a RST (connect fails at once: ECONNREFUSED), each UDP datagram by
    # an ICMP port unreachable; both are recorded with their destination. Other packets to a
    # unicast address are recorded without a port and dropped; multicast and link-local (the
    # kernel's own neighbour discovery) are ignored.
    if len(p) < 20:
        return
    v6 = p[0] >> 4 == 6
    if v6:
        if len(p) < 40:
            return
        proto, src, dst, hl = p[6], p[8:24], p[24:40], 40
        if dst[0] == 0xff or (dst[0] == 0xfe and dst[1] & 0xc0 == 0x80):
            return
    else:
        if p[0] >> 4 != 4:
            return
        proto, src, dst, hl = p[9], p[12:16], p[16:20], (p[0] & 15) * 4
        if dst[0] >= 224 or dst == b'\xff\xff\xff\xff' or struct.unpack_from('!H', p, 6)[0] & 0x1fff:
            return
    seg = p[hl:]
    if v6 and proto == 44 and len(seg) >= 8:
        # A fragment header: the first fragment carries the transport header, the others are not attempts.
        if struct.unpack_from('!H', seg, 2)[0] >> 3:
            return
        proto, seg = seg[0], seg[8:]
    reply = None
    if proto == 6 and len(seg) >= 20:
        sport, dport, seq = struct.unpack_from('!HHI', seg)
        flags = seg[13]
        if not (flags & 0x02) or flags & 0x14:
            return  # only a SYN opens an attempt
        ack = (seq + 1 + max(0, len(seg) - (seg[12] >> 4) * 4)) & 0xffffffff
        record(n, 'tcp', v6, dst, dport)
        rst = struct.pack('!HHIIBBHHH', dport, sport, 0, ack, 5 << 4, 0x14, 0, 0, 0)
        reply = ip_packet(v6, dst, src, 6, with_sum(rst, 16, v6, dst, src, 6))
    elif proto == 17 and len(seg) >= 8:
        sport, dport = struct.unpack_from('!HH', seg)
        record(n, 'udp', v6, dst, dport, dns_name(seg[8:]) if dport == 53 else None)
        if v6:
            icmp = struct.pack('!BBHI', 1, 4, 0, 0) + p[:1184]
            reply = ip_packet(True, dst, src, 58, with_sum(icmp, 2, True, dst, src, 58))
        else:
            icmp = struct.pack('!BBHI', 3, 3, 0, 0) + p[:hl + 8]
            icmp = icmp[:2] + struct.pack('!H', csum(icmp)) + icmp[4:]
            reply = ip_packet(False, dst, src, 1, icmp)
    elif v6 and proto == 58 and len(seg) >= 1 and seg[0] < 128:
        return  # an ICMPv6 error the kernel sends itself
    else:
        record(n, {1: 'icmp', 58: 'icmpv6'}.get(proto, 'ip-%d' % proto), v6, dst, None)
    if reply is not None:
        try:
            os.write(fd, reply)
        except OSError:
            pass

def read_tun(w, extra=0):
    # Reads what a sandbox sent, within the budget, and then at most extra more; a flood past it
    # stays in the kernel's queue (bounded: TUN_QUEUE packets, the rest dropped and counted by the kernel).
    n = w.get('net')
    while n is not None:
        if budget[0] <= 0:
            n['capped'] = True
            if extra <= 0:
                return
            extra -= 1
        else:
            budget[0] -= 1
        try:
            p = os.read(n['fd'], 65536)
        except BlockingIOError:
            return
        except OSError:
            net_detach(w)  # the namespace is gone
            return
        n['packets'] += 1
        on_packet(n['fd'], n, p)

def read_tuns(ready):
    now = time.monotonic()
    if now >= budget[1]:
        budget[0], budget[1] = NET_BUDGET, now + 1.0
    for fd, wid in list(tuns.items()):
        if fd in ready and wid in watches:
            read_tun(watches[wid])

def net_drain(w):
    n = w.get('net')
    if n is None:
        return {}
    dropped = 0
    if n['capped'] or n['packets'] > 0:
        # The kernel drops what overflows the queue, budget spent or the helper not scheduled in time.
        n['packets'] = 0
        total = tx_dropped(n)
        dropped, n['dropped'] = max(0, total - n['dropped']), total
    out = {'net': list(n['seen'].values()), 'netMore': n['more'], 'netDropped': dropped, 'netCapped': n['capped']}
    n['seen'], n['more'], n['capped'] = {}, 0, False
    return out

def join_execs(execs, paths):
    # A command line lost (the process exited first) is replaced by the path the exec opened; a
    # path whose pid has no exec event (the connector's event lost) is an exec of its own.
    by_pid = {}
    for pid, p in paths:
        by_pid.setdefault(pid, []).append(p)
    out = []
    for e in execs:
        ps = by_pid.get(e['pid'])
        if e['argv'] is None and ps:
            e = {'pid': e['pid'], 'argv': [ps.pop(0)], 'from': 'path'}
        out.append(e)
    had = set(e['pid'] for e in execs)
    for pid, ps in by_pid.items():
        if pid not in had and ps:
            out.append({'pid': pid, 'argv': [ps[0]], 'from': 'path'})
    return out

def forget_exited():
    for t in exited:
        owner.pop(t, None)
    del exited[:]

def net_watch(wid, w, pid):
    try:
        tun, rt, idx = net_attach(pid)
    except OSError as e:
        return {'netError': e.strerror or str(e)}
    w['net'] = {'fd': tun, 'rt': rt, 'idx': idx, 'seen': {}, 'more': 0, 'capped': False, 'dropped': 0, 'packets': 0}
    tuns[tun] = wid
    return {'net': True}

def prune(keep=None):
    # Forgets the watches whose sandbox is gone (their cgroup removed), closing their TUN devices:
    # an open TUN fd keeps its network namespace alive.
    for k in [k for k, v in watches.items() if k != keep and not os.path.isdir('/sys/fs/cgroup/pids' + v['cgroup'])]:
        net_detach(watches.pop(k))

def handle(req):
    op = req.get('op')
    wid = req.get('id')
    if op == 'watch':
        if wid in watches:
            net_detach(watches[wid])
        w = {'net': None, 'cgroup': req['cgroup'], 'roots': [os.path.realpath(r) for r in req.get('roots', [])], 'inside': req.get('inside', '/workspace'), 'execs': [], 'paths': [], 'reads': [], 'lost': 0}
        watches[wid] = w
        try:
            with open('/sys/fs/cgroup/pids' + req['cgroup'] + '/cgroup.procs') as f:
                for line in f:
                    if line.strip():
                        owner[int(line)] = wid
        except OSError as e:
            return {'ok': False, 'error': 'cgroup: %s' % e}
        marked, errors = 0, []
        if fan >= 0:
            for d in req.get('dirs', []):
                r = libc.fanotify_mark(fan, 0x1 | 0x4 | 0x8, FAN_OPEN | FAN_ON_CHILD, -100, d.encode())
                if r == 0:
                    marked += 1
                elif len(errors) < 5:
                    errors.append('%s: %s' % (d, os.strerror(ctypes.get_errno())))
            # Every exec from the filesystems the sandbox runs programs from (FAN_MARK_FILESYSTEM).
            # Marked again for each sandbox (idempotent): a device number is reused by a later filesystem.
            for d in req.get('execfs', []):
                if libc.fanotify_mark(fan, 0x1 | 0x100, FAN_OPEN_EXEC, -100, d.encode()) != 0 and len(errors) < 5:
                    errors.append('exec mark %s: %s' % (d, os.strerror(ctypes.get_errno())))
        prune(wid)
        out = {'ok': True, 'marked': marked, 'errors': errors}
        if req.get('netPid'):
            out.update(net_watch(wid, w, int(req['netPid'])))
        return out
    if op == 'net':
        # A new network namespace for a watched sandbox (its shell restarted): the device moves there.
        w = watches.get(wid)
        if w is None:
            return {'ok': False, 'error': 'not watched'}
        net_detach(w)
        out = {'ok': True}
        out.update(net_watch(wid, w, int(req['netPid'])))
        return out
    if op == 'drain':
        w = watches.get(wid)
        if w is None:
            return {'execs': [], 'reads': [], 'lost': 0, 'unknown': True}
        # What the action sent is in the answer: the queue is read to its end, past a spent budget
        # by at most the queue's length (what a flood dropped beyond it, the kernel counted).
        read_tuns(())
        read_tun(w, TUN_QUEUE)
        out = {'execs': join_execs(w['execs'], w['paths']), 'reads': w['reads'], 'lost': w['lost']}
        out.update(net_drain(w))
        w['execs'], w['paths'], w['reads'], w['lost'] = [], [], [], 0
        return out
    if op == 'unwatch':
        if wid in watches:
            net_detach(watches[wid])
        watches.pop(wid, None)
        for k in [k for k, v in owner.items() if v == wid]:
            owner.pop(k, None)
        return {'ok': True}
    return {'error': 'unknown op'}

def main():
    # A command line is read from /proc after the exec: the sooner the helper runs, the fewer
    # short-lived processes are gone by then. The helper sleeps in select() otherwise.
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(1))
    except (OSError, AttributeError):
        try:
            os.setpriority(os.PRIO_PROCESS, 0, -20)
        except OSError:
            pass
    sys.stdout.write(json.dumps({'ready': True, 'exec': nl is not None, 'reads': fan >= 0, 'why': why}) + '\n')
    sys.stdout.flush()
    stdin = sys.stdin.buffer
    fds = [0] + ([nl.fileno()] if nl else []) + ([fan] if fan >= 0 else [])
    buf = b''
    pruned = time.monotonic()
    while True:
        # A TUN device is left unread while the packet budget is spent (until the window ends),
        # and checked every few seconds for a sandbox gone.
        now = time.monotonic()
        spent = budget[0] <= 0 and now < budget[1]
        timeout = None if not tuns else (budget[1] - now) if spent else 5.0
        r, _, _ = select.select(fds + ([] if spent else list(tuns)), [], [], timeout)
        if nl:
            read_proc_events()
        if fan >= 0:
            read_fan_events()
        forget_exited()
        if tuns:
            read_tuns(set(r))
            if time.monotonic() - pruned > 5.0:
                pruned = time.monotonic()
                prune()
        if 0 in r:
            chunk = os.read(0, 65536)
            if not chunk:
                return
            buf += chunk
            while b'\n' in buf:
                line, buf = buf.split(b'\n', 1)
                # Empty the kernel's queues first: all the action did before this request is in the answer.
                if nl:
                    read_proc_events()
                if fan >= 0:
                    read_fan_events()
                forget_exited()
                try:
                    out = handle(json.loads(line))
                except Exception as e:
                    out = {'error': str(e)}
                sys.stdout.write(json.dumps(out) + '\n')
                sys.stdout.flush()

main()
`;
