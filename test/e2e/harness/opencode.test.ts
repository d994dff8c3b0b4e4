import { describePreset } from './preset-kit.js';

// Tool names and argument shapes as OpenCode 1.18.33 declares them (seen by pointing it at a logging stub).
describePreset('opencode', {
  write: { name: 'write', arguments: { filePath: '/workspace/answer.py', content: 'print(6 * 7)\n' } },
  run: { name: 'bash', arguments: { command: 'python3 answer.py > out.txt', description: 'run it' } },
  read: { name: 'read', arguments: { filePath: '/workspace/out.txt' } },
});
