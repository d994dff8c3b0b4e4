#!/usr/bin/env python3
"""Writes tasks.jsonl: `harness` instances that run simple_agent.py or rewriting_agent.py.

Each instance ships its agent as a file (`agent/<name>.py`, with the task text in
`agent/TASK.md`), so the sandbox needs nothing but python3. `oracle` holds the assistant turns
the oracle replay backend answers the agent's chat requests with (tool calls in our neutral
form; the proxy turns them into OpenAI `tool_calls`). Run it after editing an agent;
`--check` fails when tasks.jsonl is stale (the tests run it).

    python3 examples/harness/make_tasks.py [--check]
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def bash(command):
    return {"tool_calls": [{"name": "bash", "arguments": {"command": command}}]}


def done(text="Done."):
    return {"content": text}


TASKS = [
    {
        "instance_id": "harness-hello",
        "agent": "simple_agent.py",
        "task": "Create a file hello.txt in the current directory containing exactly one line: hello world",
        "files": {},
        "eval_command": "grep -qx 'hello world' hello.txt",
        "max_llm_calls": 5,
        "oracle": [bash("echo 'hello world' > hello.txt && cat hello.txt"), done("hello.txt is written.")],
    },
    {
        "instance_id": "harness-count-stream",
        "agent": "simple_agent.py",
        "args": ["--stream"],
        "task": "data.csv has a header line. Write the number of data rows (without the header) to count.txt.",
        "files": {"data.csv": "name,score\nann,3\nbob,5\ncid,4\ndee,1\n"},
        "eval_command": 'test "$(tr -d "[:space:]" < count.txt)" = 4',
        "max_llm_calls": 6,
        "oracle": [bash("head -3 data.csv"), bash("tail -n +2 data.csv | wc -l > count.txt && cat count.txt"), done("4 data rows.")],
    },
    {
        "instance_id": "harness-fix-rewriting",
        "agent": "rewriting_agent.py",
        "task": "calc.py has a bug: add(2, 3) should be 5. Fix it so `python3 test_calc.py` passes, then write PASS to result.txt.",
        "files": {
            "calc.py": "def add(a, b):\n    return a - b\n",
            "test_calc.py": "from calc import add\nassert add(2, 3) == 5, add(2, 3)\nprint('ok')\n",
        },
        "eval_command": "python3 test_calc.py && grep -qx PASS result.txt",
        "max_llm_calls": 10,
        # Five tool-call turns: the agent rewrites its history after the third.
        "oracle": [
            bash("ls"),
            bash("cat calc.py test_calc.py"),
            bash("python3 test_calc.py; echo status=$?"),
            bash("sed -i 's/a - b/a + b/' calc.py && cat calc.py"),
            bash("python3 test_calc.py && echo PASS > result.txt"),
            done("Fixed: add returned a - b."),
        ],
    },
    {
        "instance_id": "harness-sum-rewriting-stream",
        "agent": "rewriting_agent.py",
        "args": ["--stream"],
        "task": "numbers.txt holds one integer per line. Write their sum to sum.txt and their maximum to max.txt.",
        "files": {"numbers.txt": "4\n17\n-3\n9\n"},
        "eval_command": 'test "$(cat sum.txt)" = 27 && test "$(cat max.txt)" = 17',
        "max_llm_calls": 10,
        "oracle": [
            bash("wc -l numbers.txt"),
            bash("awk '{ s += $1 } END { print s }' numbers.txt > sum.txt; cat sum.txt"),
            bash("sort -n numbers.txt | tail -1 > max.txt; cat max.txt"),
            bash("cat sum.txt max.txt"),
            done("sum 27, max 17."),
        ],
    },
]


def instance(t):
    agent_src = open(os.path.join(HERE, t["agent"])).read()
    files = {f"agent/{t['agent']}": agent_src, "agent/TASK.md": t["task"] + "\n", **t["files"]}
    args = " ".join(t.get("args", []))
    return {
        "data_source": "harness",
        "instance_id": t["instance_id"],
        "command": f"python3 agent/{t['agent']} agent/TASK.md {args}".strip(),
        "files": files,
        "eval_command": t["eval_command"],
        "max_llm_calls": t["max_llm_calls"],
        "max_tokens_total": 32768,
        "oracle": t["oracle"],
    }


def main(argv):
    text = "".join(json.dumps(instance(t)) + "\n" for t in TASKS)
    path = os.path.join(HERE, "tasks.jsonl")
    if "--check" in argv:
        if not os.path.exists(path) or open(path).read() != text:
            print("examples/harness/tasks.jsonl is stale: run python3 examples/harness/make_tasks.py", file=sys.stderr)
            return 1
        return 0
    with open(path, "w") as f:
        f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
