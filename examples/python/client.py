#!/usr/bin/env python3
"""The trainer's side of rollout-runtime, with the Python standard library only.

It registers an LLM backend, submits GRPO groups two ways -- through the ProRL-compatible
``/process`` endpoint (one thread per rollout, as ProRL trainers do) and through the native
``/v1/batches`` API while following progress on the ``/v1/events`` WebSocket -- and checks the
token invariants of every result. Every rollout that failed (a ProRL result with a
``critical_error`` or an ``error``; a native result whose outcome is not completed or truncated)
is reported on stderr with its error. It exits 1 when any rollout failed or any invariant
fails, 2 on a usage or connection error, 0 otherwise.

    python3 examples/python/client.py --url http://127.0.0.1:8006 --backend oracle \
        --tasks examples/shell.jsonl --groups 2 --n 4

Token invariants checked (what a trainer relies on to build its loss):
  * ProRL result: every assistant message has as many logprobs as token_ids; each assistant
    turn's input_ids start with the previous turn's input_ids + token_ids (append-only, never
    re-tokenized); a sample not filtered has critical_error null and at least one sampled token;
    a filtered sample is never resolved.
  * Native result: tokens, lossMask and logprobs have one length; the loss-mask ones are exactly
    the sampled tokens, in order, with their logprobs; the last turn's prompt ids + output ids
    are the full token list; every prompt extends the previous prompt + output.
"""

import argparse
import base64
import json
import os
import socket
import struct
import sys
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

TRAINABLE = ("completed", "truncated")


# --------------------------------------------------------------------------------------------
# HTTP


class Api:
    def __init__(self, url, token=None, timeout=600):
        self.url = url.rstrip("/")
        self.token = token
        self.timeout = timeout

    def call(self, method, path, body=None):
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url + path, data=data, method=method)
        req.add_header("content-type", "application/json")
        if self.token:
            req.add_header("authorization", "Bearer " + self.token)
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as res:
                return res.status, json.loads(res.read() or b"null")
        except urllib.error.HTTPError as e:
            raw = e.read()
            try:
                return e.code, json.loads(raw)
            except ValueError:
                return e.code, {"raw": raw.decode("utf-8", "replace")}


class BufferError(Exception):
    """A /v1/buffers call answered an error (its status and the server's {code, message, issues})."""

    def __init__(self, status, body):
        err = (body or {}).get("error") or {}
        super().__init__("HTTP %s %s: %s %s" % (status, err.get("code"), err.get("message"), err.get("issues") or ""))
        self.status = status
        self.body = body


class RolloutBuffer:
    """The rollout buffer of GRPO groups over ``/v1/buffers`` (see docs/async-rl.md).

    The service keeps up to ``groups`` groups in flight (running, or complete and not yet taken)
    and hands out complete groups as they finish: ``take`` long-polls (``lease_ms`` for
    at-least-once delivery, with ``ack`` / ``release``), ``stream`` yields each group from the
    NDJSON stream (at most once). ``over_provision`` k starts n+k members and keeps the first n to
    finish; ``dynamic_sampling`` drops groups whose rewards are all equal and starts the next
    prompt in their place.
    """

    def __init__(self, api, groups, n, instances=(), sampling_params=None, over_provision=0,
                 order="completion", dynamic_sampling=False, end=False):
        self.api = api
        body = {"groups": groups, "n": n, "over_provision": over_provision, "order": order,
                "dynamic_sampling": dynamic_sampling, "instances": list(instances), "end": end}
        if sampling_params is not None:
            body["sampling_params"] = sampling_params
        self.stats = self._ok(*api.call("POST", "/v1/buffers", body))
        self.id = self.stats["id"]

    @staticmethod
    def _ok(status, body):
        if status >= 400:
            raise BufferError(status, body)
        return body

    def add(self, instances, sampling_params=None, end=False):
        body = {"instances": list(instances), "end": end}
        if sampling_params is not None:
            body["sampling_params"] = sampling_params
        self.stats = self._ok(*self.api.call("POST", "/v1/buffers/%s/instances" % self.id, body))
        return self.stats

    def end(self):
        return self.add([], end=True)

    def take(self, max_groups=1, wait_ms=0, lease_ms=None):
        """Up to ``max_groups`` complete groups, waiting up to ``wait_ms`` for the first.

        With ``lease_ms`` the groups are leased (at-least-once): each has a ``lease_id`` to pass
        to ``ack`` once it is trained on; one not acked within ``lease_ms`` (the trainer died,
        say) goes back in line and is handed out again, its ``deliveries`` one higher.
        """
        req = {"max": max_groups, "wait_ms": wait_ms}
        if lease_ms is not None:
            req["lease_ms"] = lease_ms
        body = self._ok(*self.api.call("POST", "/v1/buffers/%s/take" % self.id, req))
        self.stats = body["buffer"]
        return body["groups"]

    def ack(self, lease_ids):
        """Acks leased groups: delivered for good. Answers {acked, unknown}; an unknown lease was no longer held (expired or released: its group may have gone to another taker)."""
        body = self._ok(*self.api.call("POST", "/v1/buffers/%s/ack" % self.id, {"leases": list(lease_ids)}))
        self.stats = body["buffer"]
        return {"acked": body["acked"], "unknown": body["unknown"]}

    def release(self, lease_ids):
        """Gives leased groups back unacked: back in line, to be handed out again. Answers {released, unknown}."""
        body = self._ok(*self.api.call("POST", "/v1/buffers/%s/release" % self.id, {"leases": list(lease_ids)}))
        self.stats = body["buffer"]
        return {"released": body["released"], "unknown": body["unknown"]}

    def stream(self):
        """Yields each complete group as the service writes it; returns at the buffer's end."""
        req = urllib.request.Request(self.api.url + "/v1/buffers/%s/stream" % self.id)
        if self.api.token:
            req.add_header("authorization", "Bearer " + self.api.token)
        with urllib.request.urlopen(req, timeout=self.api.timeout) as res:
            for line in res:
                msg = json.loads(line)
                if msg["type"] == "group":
                    yield msg["group"]
                elif msg["type"] == "done":
                    self.stats = msg["buffer"]
                    return
                else:
                    raise BufferError(500, msg)

    def stop_group(self, group_id):
        """Stops a running group early; it comes out with the members that finished."""
        return self._ok(*self.api.call("POST", "/v1/buffers/%s/groups/%s/stop" % (self.id, urllib.parse.quote(group_id, safe="")), None))

    def close(self):
        """Deletes the buffer: its running rollouts are cancelled (their sandboxes closed)."""
        status, body = self.api.call("DELETE", "/v1/buffers/%s" % self.id)
        return body if status < 400 else None


# --------------------------------------------------------------------------------------------
# A minimal WebSocket client (RFC 6455) over a plain socket: text frames, ping/pong, close.


class WebSocket:
    def __init__(self, url, token=None, timeout=30):
        u = urllib.parse.urlparse(url)
        self.sock = socket.create_connection((u.hostname, u.port or 80), timeout=timeout)
        key = base64.b64encode(os.urandom(16)).decode()
        path = (u.path or "/") + ("?" + u.query if u.query else "")
        lines = [
            "GET %s HTTP/1.1" % path,
            "Host: %s:%d" % (u.hostname, u.port or 80),
            "Upgrade: websocket",
            "Connection: Upgrade",
            "Sec-WebSocket-Key: " + key,
            "Sec-WebSocket-Version: 13",
        ]
        if token:
            lines.append("Authorization: Bearer " + token)
        self.sock.sendall(("\r\n".join(lines) + "\r\n\r\n").encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(4096)
            if not chunk:
                raise ConnectionError("connection closed during the WebSocket handshake")
            head += chunk
        head, self.buf = head.split(b"\r\n\r\n", 1)
        status = head.split(b"\r\n", 1)[0]
        if b" 101 " not in status:
            raise ConnectionError("WebSocket upgrade refused: " + status.decode("latin-1"))

    def _read(self, n):
        while len(self.buf) < n:
            chunk = self.sock.recv(65536)
            if not chunk:
                raise ConnectionError("WebSocket closed")
            self.buf += chunk
        out, self.buf = self.buf[:n], self.buf[n:]
        return out

    def _send_frame(self, opcode, payload):
        header = bytes([0x80 | opcode])
        n = len(payload)
        if n < 126:
            header += bytes([0x80 | n])
        elif n < 65536:
            header += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            header += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(header + mask + masked)

    def send(self, obj):
        self._send_frame(0x1, json.dumps(obj).encode())

    def recv(self):
        """The next JSON message; answers pings; raises ConnectionError on close."""
        message = b""
        while True:
            b0, b1 = self._read(2)
            opcode, n = b0 & 0x0F, b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._read(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._read(8))[0]
            if b1 & 0x80:
                mask = self._read(4)
                payload = bytes(b ^ mask[i % 4] for i, b in enumerate(self._read(n)))
            else:
                payload = self._read(n)
            if opcode == 0x9:
                self._send_frame(0xA, payload)
                continue
            if opcode == 0xA:
                continue
            if opcode == 0x8:
                raise ConnectionError("WebSocket closed by server: %r" % payload[2:].decode("utf-8", "replace"))
            message += payload
            if b0 & 0x80:
                return json.loads(message.decode())

    def close(self):
        try:
            self._send_frame(0x8, struct.pack(">H", 1000))
        except OSError:
            pass
        self.sock.close()


# --------------------------------------------------------------------------------------------
# Invariants


def check_prorl(r, problems, label):
    def bad(msg):
        problems.append("%s: %s" % (label, msg))

    for key in ("messages", "tools", "resolved", "reward", "critical_error", "filter", "finish", "finish_reason",
                "end_properly", "success", "error", "instance_id", "trajectory_id", "timing"):
        if key not in r:
            bad("missing field %s" % key)
    # The reference's clients read `if r['finish']` (a bool) and `json.loads(tool_call['arguments'])`.
    if not isinstance(r.get("finish"), bool):
        bad("finish is %r, not a bool" % (r.get("finish"),))
    call_ids = set()
    for i, m in enumerate(r.get("messages", [])):
        if "token_ids" not in m:
            bad("message %d (%s) without token_ids" % (i, m.get("role")))
        if m.get("role") == "assistant":
            call_ids = set()
            for c in m.get("tool_calls") or []:
                try:
                    json.loads(c["arguments"])
                except (TypeError, ValueError):
                    bad("message %d: tool-call arguments %r are not a JSON string" % (i, c.get("arguments")))
                if "id" in c:
                    call_ids.add(c["id"])
        elif m.get("role") == "tool" and "tool_call_id" in m and m["tool_call_id"] not in call_ids:
            bad("message %d: tool_call_id %r names no call of the assistant message before it" % (i, m["tool_call_id"]))
    timing = r.get("timing") or {}
    for key in ("init_time", "run_time", "eval_time", "others_time", "counted_elapsed", "timeout_triggered"):
        if key not in timing:
            bad("missing timing.%s" % key)
    if r.get("filter"):
        if r.get("resolved"):
            bad("a filtered sample is resolved")
    elif r.get("critical_error") is not None:
        bad("critical_error %r but not filtered" % r.get("critical_error"))
    prev = None
    sampled = 0
    for i, m in enumerate(r.get("messages", [])):
        if m.get("role") != "assistant" or "token_ids" not in m:
            continue
        ids, inp, lps = m["token_ids"], m.get("input_ids"), m.get("logprobs")
        sampled += len(ids)
        if lps is None or len(lps) != len(ids):
            bad("message %d: %s logprobs for %d token_ids" % (i, None if lps is None else len(lps), len(ids)))
        if inp is None:
            bad("message %d: assistant turn without input_ids" % i)
            continue
        if prev is not None and inp[: len(prev)] != prev:
            bad("message %d: input_ids do not extend the previous prompt + output" % i)
        prev = inp + ids
    if not r.get("filter") and sampled == 0:
        bad("a trainable sample with no sampled tokens")


def check_native(res, problems, label):
    def bad(msg):
        problems.append("%s: %s" % (label, msg))

    t = res["trajectory"]
    tokens, mask, lps = t["tokens"], t["lossMask"], t["logprobs"]
    if not (len(tokens) == len(mask) == len(lps)):
        bad("tokens/lossMask/logprobs lengths %d/%d/%d" % (len(tokens), len(mask), len(lps)))
        return
    turns = t["turns"]
    outputs = [tok for turn in turns for tok in turn["outputIds"]]
    out_lps = [lp for turn in turns for lp in turn["logprobs"]]
    masked = [tok for tok, m in zip(tokens, mask) if m == 1]
    masked_lps = [lp for lp, m in zip(lps, mask) if m == 1]
    if sum(mask) != len(outputs):
        bad("%d loss-mask ones for %d sampled tokens" % (sum(mask), len(outputs)))
    if masked != outputs:
        bad("loss-mask tokens are not the sampled tokens")
    if any(abs(a - b) > 1e-6 for a, b in zip(masked_lps, out_lps)):
        bad("logprobs under the mask differ from the turns' logprobs")
    if any(lp != 0 for lp, m in zip(lps, mask) if m == 0):
        bad("non-zero logprob outside the mask")
    if turns:
        last = turns[-1]
        if last["promptIds"] + last["outputIds"] != tokens:
            bad("last prompt + output != tokens")
        for i in range(1, len(turns)):
            before = turns[i - 1]["promptIds"] + turns[i - 1]["outputIds"]
            if turns[i]["promptIds"][: len(before)] != before:
                bad("turn %d prompt does not extend turn %d prompt + output" % (i, i - 1))
    if res["outcome"] in TRAINABLE and not turns:
        bad("a %s rollout with no assistant turn" % res["outcome"])


def failed_rollouts(prorl_results, native_results):
    """One line per failed rollout, naming it and its error: none is left out."""
    out = []
    for r in prorl_results:
        if r.get("critical_error") is not None or r.get("error"):
            out.append("process %s/%s: critical_error=%s: %s" % (r.get("instance_id"), r.get("trajectory_id"),
                                                                r.get("critical_error"), r.get("error")))
    for r in native_results:
        if r.get("outcome") not in TRAINABLE:
            err = r.get("error") or {}
            out.append("rollout %s (%s): %s: %s: %s" % (r.get("id"), r.get("instanceId"), r.get("outcome"),
                                                       err.get("code"), err.get("message")))
    return out


# --------------------------------------------------------------------------------------------


def run_prorl(api, instances, n, sampling, problems, results):
    """Each group: n threads, each holding one /process request open, as ProRL trainers do."""
    threads = []
    lock = threading.Lock()

    def one(inst, k):
        body = {"instance": dict(inst, trajectory_id=str(k)), "sampling_params": sampling}
        status, r = api.call("POST", "/process", body)
        label = "process %s/%d" % (inst.get("instance_id"), k)
        with lock:
            if status != 200:
                problems.append("%s: HTTP %d %s" % (label, status, r))
                return
            results.append(r)
            check_prorl(r, problems, label)

    for inst in instances:
        for k in range(n):
            th = threading.Thread(target=one, args=(inst, k))
            th.start()
            threads.append(th)
    for th in threads:
        th.join()


def run_native(api, ws_url, token, instances, n, sampling, problems, results, quiet):
    """One batch of GRPO groups, with progress from the event stream."""
    ws = WebSocket(ws_url, token)
    try:
        hello = ws.recv()
        ws.send({"type": "subscribe", "sub": "batch", "after": hello.get("seq", -1)})
        status, batch = api.call("POST", "/v1/batches", {"instances": instances, "n": n, "sampling_params": sampling})
        if status != 202:
            problems.append("batch: HTTP %d %s" % (status, batch))
            return
        pending = set(batch["rollout_ids"])
        total = len(pending)
        last_seq = None
        deadline = time.time() + 600
        while pending and time.time() < deadline:
            msg = ws.recv()
            if msg["type"] == "gap":
                # Missed events (slow client or old cursor): fall back to asking for the stragglers.
                for rid in list(pending):
                    st, got = api.call("GET", "/v1/rollouts/" + rid)
                    if st == 200 and got.get("outcome"):
                        pending.discard(rid)
                continue
            if msg["type"] != "event":
                continue
            ev = msg["event"]
            if last_seq is not None and ev["seq"] <= last_seq:
                problems.append("event seq went backwards: %d after %d" % (ev["seq"], last_seq))
            last_seq = ev["seq"]
            if ev["type"] == "rollout.result" and ev["rolloutId"] in pending:
                pending.discard(ev["rolloutId"])
                if not quiet:
                    print("  [%d/%d] %s %s reward=%s" % (total - len(pending), total, ev["rolloutId"], ev["outcome"], ev["reward"]))
        if pending:
            problems.append("batch: %d rollouts never ended" % len(pending))
        for rid in batch["rollout_ids"]:
            st, got = api.call("GET", "/v1/rollouts/" + rid)
            if st != 200 or not got.get("result"):
                problems.append("rollout %s: HTTP %d, no result" % (rid, st))
                continue
            results.append(got["result"])
            check_native(got["result"], problems, "rollout " + rid)
    finally:
        ws.close()


def main(argv=None):
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--url", default="http://127.0.0.1:8006")
    p.add_argument("--token", default=os.environ.get("ROLLOUT_TOKEN"))
    p.add_argument("--backend", default=None, help="address to register with /add_llm_server (e.g. oracle, http://h:p)")
    p.add_argument("--tasks", default=os.path.join(here, "..", "shell.jsonl"))
    p.add_argument("--groups", type=int, default=2, help="instances taken from the task file")
    p.add_argument("--n", type=int, default=4, help="GRPO group size")
    p.add_argument("--max-iterations", type=int, default=8)
    p.add_argument("--quiet", action="store_true")
    a = p.parse_args(argv)

    api = Api(a.url, a.token)
    with open(a.tasks) as f:
        instances = [json.loads(line) for line in f if line.strip()][: a.groups]
    sampling = {"max_iterations": a.max_iterations, "temperature": 1.0}
    try:
        status, body = api.call("GET", "/status")
        if status == 503:
            api.call("POST", "/start")
        if a.backend:
            status, body = api.call("POST", "/add_llm_server", {"address": a.backend})
            if status != 200:
                print("add_llm_server: HTTP %d %s" % (status, body), file=sys.stderr)
                return 2
    except OSError as e:
        print("cannot reach %s: %s" % (a.url, e), file=sys.stderr)
        return 2

    problems = []
    prorl_results, native_results = [], []
    t0 = time.time()
    run_prorl(api, instances, a.n, sampling, problems, prorl_results)
    t1 = time.time()
    ws_url = a.url.replace("http://", "ws://", 1).rstrip("/") + "/v1/events"
    run_native(api, ws_url, a.token, instances, a.n, sampling, problems, native_results, a.quiet)
    t2 = time.time()

    def summary(name, rs, key):
        resolved = sum(1 for r in rs if r.get("resolved"))
        filtered = sum(1 for r in rs if key(r))
        print("%-8s %3d results, %3d resolved, %3d filtered" % (name, len(rs), resolved, filtered))

    failures = failed_rollouts(prorl_results, native_results)
    summary("process", prorl_results, lambda r: r.get("filter"))
    summary("v1", native_results, lambda r: r.get("outcome") not in TRAINABLE)
    print("process %.2fs, v1 %.2fs" % (t1 - t0, t2 - t1))
    for msg in failures:
        print("ROLLOUT FAILED: " + msg, file=sys.stderr)
    for msg in problems[:50]:
        print("INVARIANT FAILED: " + msg, file=sys.stderr)
    print(json.dumps({"ok": not problems and not failures, "process": len(prorl_results), "v1": len(native_results),
                      "problems": len(problems), "failed": len(failures)}))
    return 1 if problems or failures else 0


if __name__ == "__main__":
    sys.exit(main())
