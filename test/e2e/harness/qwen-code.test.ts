import { describePreset } from './preset-kit.js';

// Tool names and argument shapes as Qwen Code 0.24.4 declares them (seen by pointing it at a logging stub).
describePreset('qwen-code', {
  write: { name: 'write_file', arguments: { file_path: '/workspace/answer.py', content: 'print(6 * 7)\n' } },
  run: { name: 'run_shell_command', arguments: { command: 'python3 answer.py > out.txt', description: 'run it' } },
  read: { name: 'read_file', arguments: { file_path: '/workspace/out.txt' } },
});
