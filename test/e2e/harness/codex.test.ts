import { describePreset } from './preset-kit.js';

// Codex 0.169.0 over the Responses dialect: its one shell tool, exec_command ({cmd}), writes, runs and reads
// (apply_patch is a freeform tool, not a function: the proxy serves function tools).
describePreset('codex', {
  write: { name: 'exec_command', arguments: { cmd: "printf 'print(6 * 7)\\n' > answer.py" } },
  run: { name: 'exec_command', arguments: { cmd: 'python3 answer.py > out.txt' } },
  read: { name: 'exec_command', arguments: { cmd: 'cat out.txt' } },
});
