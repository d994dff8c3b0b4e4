import { describePreset } from './preset-kit.js';

// Claude Code 2.1.328 over the Anthropic Messages dialect: tool names and input shapes as it declares them.
describePreset('claude-code', {
  write: { name: 'Write', arguments: { file_path: '/workspace/answer.py', content: 'print(6 * 7)\n' } },
  run: { name: 'Bash', arguments: { command: 'python3 answer.py > out.txt', description: 'Run it' } },
  read: { name: 'Read', arguments: { file_path: '/workspace/out.txt' } },
});
