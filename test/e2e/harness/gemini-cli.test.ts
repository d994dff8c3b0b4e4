import { describePreset } from './preset-kit.js';

// Gemini CLI 0.61.0 over the Google generateContent dialect: function names and args as it declares them.
describePreset('gemini-cli', {
  write: { name: 'write_file', arguments: { file_path: '/workspace/answer.py', content: 'print(6 * 7)\n' } },
  run: { name: 'run_shell_command', arguments: { command: 'python3 answer.py > out.txt', description: 'Run it' } },
  read: { name: 'read_file', arguments: { file_path: '/workspace/out.txt' } },
});
