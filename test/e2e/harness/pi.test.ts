import { describePreset } from './preset-kit.js';

// Tool names and argument shapes as Pi 0.73.1 declares them (seen by pointing it at a logging stub).
describePreset('pi', {
  write: { name: 'write', arguments: { path: '/workspace/answer.py', content: 'print(6 * 7)\n' } },
  run: { name: 'bash', arguments: { command: 'python3 answer.py > out.txt' } },
  read: { name: 'read', arguments: { path: '/workspace/out.txt' } },
});
