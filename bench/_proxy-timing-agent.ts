/**
 * The Python harness that times chat calls through a rollout's LLM proxy, for bench/proxy.ts and
 * bench/proxy-hops.ts: `python3 timing_agent.py N WARMUP [tcp|uds]` makes N calls on one keep-alive
 * connection, the history growing by each answer and an "Again.", over the sandbox's loopback
 * listener (`tcp`, `$OPENAI_BASE_URL`, the default) or the bound Unix socket (`uds`), and prints
 * one short line `LAT {"p50", "n", "cpu"}` over the calls after the warm-up (ms; `cpu` is the
 * harness's own CPU per call). One line: the harness's output reaches the result only as its tail.
 */
export const TIMING_AGENT = `
import http.client, json, os, socket, sys, time, urllib.parse
n, warmup = int(sys.argv[1]), int(sys.argv[2])
mode = sys.argv[3] if len(sys.argv) > 3 else "tcp"
u = urllib.parse.urlsplit(os.environ["OPENAI_BASE_URL"])
class UnixConn(http.client.HTTPConnection):
    def connect(self):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect(os.environ.get("LLM_SOCKET", "/run/rollout/llm.sock"))
conn = UnixConn("localhost", timeout=60) if mode == "uds" else http.client.HTTPConnection(u.hostname, u.port, timeout=60)
headers = {"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"}
messages = [{"role": "user", "content": "Answer with a fixed sentence."}]
lat = []
cpu = []
for i in range(n):
    body = json.dumps({"model": "rollout-policy", "messages": messages, "max_tokens": 64})
    c = time.process_time()
    t = time.perf_counter()
    conn.request("POST", u.path + "/chat/completions", body, headers)
    r = conn.getresponse()
    data = r.read()
    lat.append((time.perf_counter() - t) * 1000)
    cpu.append((time.process_time() - c) * 1000)
    if r.status != 200:
        print("HTTP", r.status, data[:300])
        sys.exit(1)
    m = json.loads(data)["choices"][0]["message"]
    messages = messages + [{"role": "assistant", "content": m["content"]}, {"role": "user", "content": "Again."}]
kept = sorted(lat[warmup:])
print("LAT " + json.dumps({"p50": (kept[(len(kept) - 1) // 2] + kept[len(kept) // 2]) / 2, "n": len(kept), "cpu": sum(cpu[warmup:]) / len(kept)}))
`;

/**
 * The `LAT` line of the timing harness's output. Found anywhere, not by line: the harness family's
 * output may carry its shell's wait notes around it.
 * @throws Error naming `what` (and the output's tail) when the harness printed none.
 */
export function timingLine(out: string, what: string): { p50: number; n: number; cpu: number } {
  const line = /LAT (\{[^}]*\})/.exec(out)?.[1];
  if (!line) throw new Error(`${what}: the timing harness printed no latencies: ${out.slice(-1000)}`);
  return JSON.parse(line) as { p50: number; n: number; cpu: number };
}
