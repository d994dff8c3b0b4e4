"""The eval of the hostile-harness tests, run in the sandbox after the harness was stopped: the
workspace must be quiet (log.txt, written by the harness and its daemon, does not grow for a
second) and no process carrying the tag (argv[1]) may be alive in the sandbox. Exit 0 iff so."""
import os, sys, time

TAG = sys.argv[1]


def size():
    return os.path.getsize("log.txt") if os.path.exists("log.txt") else -1


def alive():
    out = []
    for p in os.listdir("/proc"):
        if not p.isdigit() or int(p) == os.getpid():
            continue
        try:
            cmd = open("/proc/%s/cmdline" % p, "rb").read().replace(b"\0", b" ").decode()
            state = open("/proc/%s/stat" % p).read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if TAG in cmd and state != "Z":
            out.append(p)
    return out


a = size()
# A quiescence check, not synchronisation: the writer appends every 20 ms, so a second with no
# growth is ~50 missed writes (an absence has no event to wait on).
time.sleep(1)
b = size()
left = alive()
print("sizes", a, b, "alive", len(left))
sys.exit(0 if a == b and a > 0 and not left else 1)
