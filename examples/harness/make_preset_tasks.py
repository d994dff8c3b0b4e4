#!/usr/bin/env python3
"""Writes presets/<preset>.jsonl: the swe-sample bug (examples/swe-sample, minilib-1) as a
`harness` instance per agent CLI preset (docs/harness-presets.md).

The repository's files seed /workspace, the problem statement is the CLI's `instruction`, and
the eval adds the hidden test and runs the suite. `oracle` holds assistant turns for the oracle
replay backend, written in each CLI's own tool names and argument shapes (read the file, fix
it, run the tests, answer), so `--backend oracle` runs the real CLI end to end without a GPU;
with a real model, drop `oracle`. `--check` fails when a file is stale (the tests run it).

    python3 examples/harness/make_preset_tasks.py [--check]
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.join(HERE, "..", "swe-sample", "repo")
SAMPLE = os.path.join(HERE, "..", "swe-sample", "tasks.jsonl")

FILE = "/workspace/minilib/intervals.py"
OLD = "if out and start < out[-1][1]:"
NEW = "if out and start <= out[-1][1]:"
SED = "sed -i 's/if out and start < out/if out and start <= out/' minilib/intervals.py"
TEST = "python3 -m pytest -q -p no:cacheprovider tests"
HIDDEN = (
    "from minilib.intervals import merge, total_length\n\n\n"
    "def test_merge_touching():\n"
    "    assert merge([(1, 2), (2, 4)]) == [(1, 4)]\n"
    "    assert total_length([(1, 2), (2, 4)]) == 4\n"
)


def call(name, **arguments):
    return {"tool_calls": [{"name": name, "arguments": arguments}]}


ANSWER = {"content": "merge now joins touching intervals (the comparison is <=); the tests pass."}

# Per preset: read the file, fix it, run the tests (each with the CLI's own tools), answer.
ORACLE = {
    "codex": [call("exec_command", cmd="cat minilib/intervals.py"), call("exec_command", cmd=SED), call("exec_command", cmd=TEST)],
    "claude-code": [
        call("Read", file_path=FILE),
        call("Edit", file_path=FILE, old_string=OLD, new_string=NEW),
        call("Bash", command=TEST, description="Run the tests"),
    ],
    "qwen-code": [
        call("read_file", file_path=FILE),
        call("edit", file_path=FILE, old_string=OLD, new_string=NEW),
        call("run_shell_command", command=TEST, description="Run the tests"),
    ],
    "pi": [call("read", path=FILE), call("bash", command=SED), call("bash", command=TEST)],
    "gemini-cli": [
        call("read_file", file_path=FILE),
        call("replace", file_path=FILE, instruction="Merge touching intervals", old_string=OLD, new_string=NEW),
        call("run_shell_command", command=TEST, description="Run the tests"),
    ],
    "opencode": [
        call("read", filePath=FILE),
        call("edit", filePath=FILE, oldString=OLD, newString=NEW),
        call("bash", command=TEST, description="Run the tests"),
    ],
}


def repo_files():
    out = {}
    for root, dirs, files in os.walk(REPO):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for f in sorted(files):
            path = os.path.join(root, f)
            with open(path, encoding="utf-8") as fh:
                out[os.path.relpath(path, REPO)] = fh.read()
    return out


def instance(preset, sample):
    return {
        "data_source": "harness",
        "instance_id": f"{sample['instance_id']}-{preset}",
        "preset": preset,
        "instruction": sample["problem_statement"] + "\n\nFix it in /workspace and run the tests (python3 -m pytest tests).",
        "files": repo_files(),
        "eval_command": f"cat > tests/test_hidden.py <<'EOF'\n{HIDDEN}EOF\n{TEST}",
        "eval_timeout_s": 120,
        "max_llm_calls": 30,
        "oracle": ORACLE[preset] + [ANSWER],
    }


def main():
    with open(SAMPLE, encoding="utf-8") as fh:
        sample = json.loads(fh.readline())
    stale = []
    for preset in ORACLE:
        text = json.dumps(instance(preset, sample)) + "\n"
        path = os.path.join(HERE, "presets", f"{preset}.jsonl")
        if "--check" in sys.argv:
            try:
                with open(path, encoding="utf-8") as fh:
                    if fh.read() != text:
                        stale.append(path)
            except FileNotFoundError:
                stale.append(path)
        else:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(text)
    if stale:
        sys.exit(f"stale: {', '.join(stale)}; run python3 examples/harness/make_preset_tasks.py")


if __name__ == "__main__":
    main()
