"""A stdlib-only agent for the sandbox end-to-end test: it reaches the model only through
OPENAI_BASE_URL / OPENAI_API_KEY, runs the bash tool calls it gets, and exits 0 when a reply has
no tool call. argv[1]: `tools` (that loop), `stubborn` (as tools, but on a refusal it prints it
and hangs instead of exiting) or `silent` (never calls, never exits)."""
import json, os, subprocess, sys, time, urllib.error, urllib.request

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
