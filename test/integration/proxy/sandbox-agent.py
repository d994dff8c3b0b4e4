"""A stdlib-only agent for the sandbox end-to-end test: it reaches the model only through
OPENAI_BASE_URL / OPENAI_API_KEY, runs the bash tool calls it gets, and exits 0 when a reply has
no tool call. argv[1]: `tools` (that loop), `stubborn` (as tools, but on a refusal it prints it
and hangs instead of exiting), `silent` (never calls, never exits), `hostile` (ignores SIGINT,
SIGQUIT, SIGTERM and SIGHUP, starts a daemon writing log.txt, runs the loop, and on a refusal
keeps writing log.txt itself), `daemon` (starts that daemon and exits 0 at once) or `partial`
(prints a line in two pieces 2.5 s apart, then exits 0). argv[2], when given, is a tag that
every process of the agent carries on its command line."""
import json, os, signal, subprocess, sys, time, urllib.error, urllib.request

HOSTILE = ("hostile", "daemon")


def deaf():
    for s in (signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, signal.SIG_IGN)


def write_forever(path, hop):
    """Appends to `path` every 20 ms; with `hop`, forks after each write and lets the parent exit,
    so the writer is a new pid every time (a single read-then-kill pass misses it)."""
    deaf()
    while True:
        with open(path, "a") as f:
            f.write("%d\n" % os.getpid())
        time.sleep(0.02)
        if hop:
            try:
                if os.fork() != 0:
                    os._exit(0)
            except OSError:
                pass  # forks refused: carry on under this pid


def daemonize(path):
    """The classic double fork: a new session, no parent but the namespace's init."""
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            devnull = os.open(os.devnull, os.O_RDWR)
            for fd in (0, 1, 2):
                os.dup2(devnull, fd)
            write_forever(path, True)
        os._exit(0)


if sys.argv[1] == "partial":
    print("partial", end="", flush=True)
    time.sleep(2.5)
    print("-rest", flush=True)
    print("last", flush=True)
    sys.exit(0)

if sys.argv[1] in HOSTILE:
    deaf()
    daemonize(os.path.abspath("log.txt"))
    # The daemon stands once it has written: the tests check it was stopped, so it must have run
    # (on a loaded machine its first write can come after this process would have exited).
    for _ in range(3000):
        if os.path.exists("log.txt") and os.path.getsize("log.txt") > 0:
            break
        time.sleep(0.01)  # a poll step of the wait on the daemon's first line
    if sys.argv[1] == "daemon":
        print("daemonised", flush=True)
        sys.exit(0)

BASE = os.environ["OPENAI_BASE_URL"]
KEY = os.environ["OPENAI_API_KEY"]
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
TOOLS = [{"type": "function", "function": {"name": "bash", "description": "run a command", "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}]


def post(path, body, key=KEY):
    req = urllib.request.Request(BASE + path, json.dumps(body).encode(), {"Authorization": "Bearer " + key, "Content-Type": "application/json"})
    try:
        with OPENER.open(req, timeout=120) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


if sys.argv[1] == "silent":
    while True:
        time.sleep(1)

print("base", BASE, flush=True)
status, err = post("/chat/completions", {"model": "m", "messages": [{"role": "user", "content": "x"}]}, key="rk-another-rollout")
print("wrong-key", status, err["error"]["code"], flush=True)
with OPENER.open(urllib.request.Request(BASE + "/models", headers={"Authorization": "Bearer " + KEY}), timeout=30) as r:
    print("models", r.status, json.loads(r.read())["data"][0]["id"], flush=True)
messages = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "Create done.txt."}]
while True:
    status, body = post("/chat/completions", {"model": "m", "messages": messages, "tools": TOOLS})
    if status != 200:
        print("refused", status, body["error"]["code"], flush=True)
        if sys.argv[1] == "stubborn":
            while True:
                time.sleep(1)
        if sys.argv[1] == "hostile":
            write_forever(os.path.abspath("log.txt"), False)
        sys.exit(3)
    msg = body["choices"][0]["message"]
    messages.append(msg)
    calls = msg.get("tool_calls") or []
    if not calls:
        print("done", flush=True)
        sys.exit(0)
    for c in calls:
        cmd = json.loads(c["function"]["arguments"])["command"]
        out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True)
        messages.append({"role": "tool", "tool_call_id": c["id"], "content": out.stdout + out.stderr})
