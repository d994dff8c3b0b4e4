"""A stdlib-only agent for the proxy tests, run on the host against the proxy's Unix socket
(PROXY_SOCK) with OPENAI_API_KEY. argv[1] picks the behaviour:
  tools    follow tool calls (bash), send the whole history each time, exit 0 without tool calls
  rewrite  as tools, but every 2 answered calls the history is replaced by a summary
  stream   as tools, with stream: true (reads the SSE chunks back into a message)
  silent   never calls the model and never exits
  greedy   calls the model until refused; prints the refusal and exits 3
  once     one call without tools; prints its finish_reason and usage, exits 0
"""
import http.client, json, os, socket, subprocess, sys, time

SOCK = os.environ["PROXY_SOCK"]
KEY = os.environ["OPENAI_API_KEY"]
MODE = sys.argv[1]
TOOLS = [{"type": "function", "function": {"name": "bash", "description": "run a command", "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}]


class Conn(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(SOCK)


def chat(messages, stream=False):
    c = Conn("localhost")
    body = {"model": "policy", "messages": messages, "tools": TOOLS}
    if stream:
        body["stream"] = True
    c.request("POST", "/v1/chat/completions", json.dumps(body), {"Authorization": "Bearer " + KEY, "Content-Type": "application/json"})
    r = c.getresponse()
    raw = r.read().decode()
    if r.status != 200:
        return r.status, json.loads(raw)
    if not stream:
        return 200, json.loads(raw)["choices"][0]["message"]
    msg = {"role": "assistant", "content": "", "tool_calls": []}
    for ev in raw.split("\n\n"):
        if not ev.startswith("data: ") or ev == "data: [DONE]":
            continue
        d = json.loads(ev[6:])["choices"][0]["delta"]
        msg["content"] += d.get("content") or ""
        for tc in d.get("tool_calls") or []:
            msg["tool_calls"].append({"id": tc["id"], "type": "function", "function": tc["function"]})
    if not msg["tool_calls"]:
        del msg["tool_calls"]
    return 200, msg


if MODE == "once":
    c = Conn("localhost")
    body = {"model": "policy", "messages": [{"role": "system", "content": "You are verbose."}, {"role": "user", "content": "Tell a long story."}]}
    c.request("POST", "/v1/chat/completions", json.dumps(body), {"Authorization": "Bearer " + KEY, "Content-Type": "application/json"})
    r = c.getresponse()
    d = json.loads(r.read().decode())
    print("once", r.status, d["choices"][0]["finish_reason"], d["usage"]["completion_tokens"], flush=True)
    sys.exit(0)

if MODE == "silent":
    while True:
        time.sleep(1)

system = {"role": "system", "content": "You are an agent."}
user = {"role": "user", "content": "Do the task."}
messages = [system, user]
answered = 0
while True:
    status, msg = chat(messages, stream=(MODE == "stream"))
    if status != 200:
        print("refused", status, msg["error"]["code"], flush=True)
        sys.exit(3)
    answered += 1
    messages.append(msg)
    calls = msg.get("tool_calls") or []
    if not calls and MODE != "greedy":
        print("done after", answered, flush=True)
        sys.exit(0)
    for c in calls:
        cmd = json.loads(c["function"]["arguments"]).get("command", "")
        out = subprocess.run(["bash", "-c", cmd], capture_output=True, text=True).stdout
        messages.append({"role": "tool", "tool_call_id": c["id"], "content": out})
    if not calls:
        messages.append({"role": "user", "content": "again"})
    if MODE == "rewrite" and answered % 2 == 0:
        messages = [system, {"role": "user", "content": "Summary of %d steps so far. Continue." % answered}]
