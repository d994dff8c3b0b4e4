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
 *
 * Both queues are filled synchronously by the kernel, so when a `drain` request arrives, the
 * helper first empties them and only then answers: everything the action did before the request
 * is in the answer. Protocol: one JSON object per line each way, answers in request order.
 *   {"op":"watch","id":S,"cgroup":"/rollout/S","dirs":[abs dirs],"roots":[host workspace],"inside":"/workspace","execfs":[paths]}
 *     → {"ok":true,"marked":n,"errors":[…]}
 *   {"op":"drain","id":S} → {"execs":[{"pid":n,"argv":[…]|null}],"reads":[workspace-relative paths],"lost":n}
 *   {"op":"unwatch","id":S} → {"ok":true}
 * On start it prints {"ready":true,"exec":bool,"reads":bool,"why":[…]} (what it could open).
 * It exits when its stdin closes (its host process ended).
 */
export const OBSERVER_SOURCE = String.raw`
import ctypes, json, os, select, socket, struct, sys

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

def handle(req):
    op = req.get('op')
    wid = req.get('id')
    if op == 'watch':
        w = {'cgroup': req['cgroup'], 'roots': [os.path.realpath(r) for r in req.get('roots', [])], 'inside': req.get('inside', '/workspace'), 'execs': [], 'paths': [], 'reads': [], 'lost': 0}
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
        # Prune watches whose sandbox is gone (their cgroup removed).
        for other in [k for k, v in watches.items() if k != wid and not os.path.isdir('/sys/fs/cgroup/pids' + v['cgroup'])]:
            watches.pop(other, None)
        return {'ok': True, 'marked': marked, 'errors': errors}
    if op == 'drain':
        w = watches.get(wid)
        if w is None:
            return {'execs': [], 'reads': [], 'lost': 0, 'unknown': True}
        out = {'execs': join_execs(w['execs'], w['paths']), 'reads': w['reads'], 'lost': w['lost']}
        w['execs'], w['paths'], w['reads'], w['lost'] = [], [], [], 0
        return out
    if op == 'unwatch':
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
    while True:
        r, _, _ = select.select(fds, [], [])
        if nl:
            read_proc_events()
        if fan >= 0:
            read_fan_events()
        forget_exited()
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
