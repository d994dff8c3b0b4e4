#!/usr/bin/env python3
"""A bring-your-own agent that rewrites its own history: Python's standard library only.

Like simple_agent.py (one `bash` tool in OpenAI's format against $OPENAI_BASE_URL with
$OPENAI_API_KEY, until the model answers without tool calls), but every 3 turns it drops the
turns so far and folds a short summary of them (the commands and their exit codes and last
lines) into the task message, as many agents do to keep their context short. The rollout's LLM
proxy sees a history that no longer extends the previous prompt and starts a new segment of
the trajectory instead of silently re-tokenizing it.

    python3 rewriting_agent.py TASK_FILE [--stream] [--max-turns N] [--every N]
"""
import json
import os
import subprocess
import sys
import urllib.error
import urllib.request

SYSTEM = (
    "You are an agent working in a Linux shell. Use the bash tool to run commands in the "
    "current directory. When the task is done, answer with a short message and no tool call."
)
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "bash",
            "description": "Run a bash command in the current directory and return its output and exit code.",
            "parameters": {
                "type": "object",
                "properties": {"command": {"type": "string", "description": "The command to run."}},
                "required": ["command"],
            },
        },
    }
]
MAX_OUTPUT = 4000


def post(path, body):
    """POSTs JSON to the endpoint; returns the HTTP response (raises HTTPError on 4xx/5xx)."""
    req = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"].rstrip("/") + path,
        data=json.dumps(body).encode(),
        headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"], "Content-Type": "application/json"},
    )
    return urllib.request.urlopen(req, timeout=600)


def chat(messages, stream=False):
    """One chat completion; returns the assistant message as a dict (content, tool_calls)."""
    body = {"model": os.environ.get("OPENAI_MODEL", "rollout-policy"), "messages": messages, "tools": TOOLS}
    if not stream:
        with post("/chat/completions", body) as resp:
            return json.load(resp)["choices"][0]["message"]
    body["stream"] = True
    content, calls = "", {}
    with post("/chat/completions", body) as resp:
        for raw in resp:  # server-sent events, one `data:` line each
            line = raw.decode().strip()
            if not line.startswith("data:"):
                continue
            data = line[5:].strip()
            if data == "[DONE]":
                break
            delta = json.loads(data)["choices"][0].get("delta", {})
            content += delta.get("content") or ""
            for tc in delta.get("tool_calls") or []:
                c = calls.setdefault(tc["index"], {"id": "", "type": "function", "function": {"name": "", "arguments": ""}})
                c["id"] = tc.get("id") or c["id"]
                fn = tc.get("function") or {}
                c["function"]["name"] += fn.get("name") or ""
                c["function"]["arguments"] += fn.get("arguments") or ""
    message = {"role": "assistant", "content": content or None}
    if calls:
        message["tool_calls"] = [calls[i] for i in sorted(calls)]
    return message


def run_bash(arguments):
    """Runs one `bash` tool call; returns what the model reads back."""
    try:
        command = json.loads(arguments or "{}")["command"]
    except (ValueError, KeyError, TypeError):
        return "error: the bash tool takes {\"command\": \"...\"}"
    try:
        p = subprocess.run(["bash", "-c", command], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
        out = p.stdout.decode(errors="replace")
        code = p.returncode
    except subprocess.TimeoutExpired:
        out, code = "(timed out after 120 s)", 124
    if len(out) > MAX_OUTPUT:
        out = out[: MAX_OUTPUT // 2] + "\n[...]\n" + out[-MAX_OUTPUT // 2 :]
    return f"{out}\n[exit code {code}]"


def tool_messages(message):
    """Runs the assistant message's tool calls; returns the `role: tool` answers."""
    out = []
    for call in message.get("tool_calls") or []:
        fn = call.get("function") or {}
        result = run_bash(fn.get("arguments")) if fn.get("name") == "bash" else f"error: unknown tool {fn.get('name')!r}"
        print(f"$ {fn.get('arguments')}\n{result}", flush=True)
        out.append({"role": "tool", "tool_call_id": call.get("id", ""), "content": result})
    return out


def summarise(turns):
    """One line per command of the dropped turns: the command, its exit code, its last line."""
    lines = []
    for m in turns:
        if m["role"] == "assistant":
            for call in m.get("tool_calls") or []:
                try:
                    lines.append("- ran: " + json.loads(call["function"]["arguments"])["command"])
                except (ValueError, KeyError, TypeError):
                    lines.append("- a malformed tool call")
        elif m["role"] == "tool":
            text = m["content"].strip().splitlines()
            lines.append("  -> " + (text[-2] + " " if len(text) > 1 else "") + (text[-1] if text else ""))
    return "\n".join(lines)


def main(argv):
    if not argv or argv[0].startswith("-"):
        print(__doc__, file=sys.stderr)
        return 2
    task = open(argv[0]).read()
    stream = "--stream" in argv
    max_turns = int(argv[argv.index("--max-turns") + 1]) if "--max-turns" in argv else 30
    every = int(argv[argv.index("--every") + 1]) if "--every" in argv else 3
    progress = []
    messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": task}]
    for turn in range(1, max_turns + 1):
        try:
            message = chat(messages, stream)
        except urllib.error.HTTPError as e:
            print(f"LLM call refused: {e.code} {e.read().decode(errors='replace')[:500]}", flush=True)
            return 0 if e.code in (410, 429) else 1
        message = {"role": "assistant", "content": message.get("content"), **({"tool_calls": message["tool_calls"]} if message.get("tool_calls") else {})}
        messages.append(message)
        if not message.get("tool_calls"):
            print(message.get("content") or "", flush=True)
            return 0
        messages.extend(tool_messages(message))
        if turn % every == 0:
            # Rewrite: the task message gains a summary, the turns themselves are dropped.
            progress.append(summarise(messages[2:]))
            messages = [messages[0], {"role": "user", "content": task + "\n\nProgress so far:\n" + "\n".join(progress)}]
            print(f"[history rewritten after turn {turn}]", flush=True)
    print(f"stopped after {max_turns} turns", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
