import { parseFlags, runOperation, UsageError } from '../args.js';
import { defaultHarnessStoreDir, HARNESS_PRESETS, HarnessStore, parseHarnessRef, PRESET_NAMES } from '../../handlers/tasks/harness-presets/index.js';

const HELP = `usage: rollout harness <install|ls|rm> [options]

  rollout harness install NAME[@VERSION]   npm install an agent CLI into the harness store
                                           (VERSION: default the preset's tested one); a
                                           rollout never downloads, it runs what is here
  rollout harness ls [--json]              installed CLIs
  rollout harness rm NAME[@VERSION]        remove one version, or every version of NAME

NAME is a preset: ${PRESET_NAMES.map((n) => `${n} (${HARNESS_PRESETS[n].package}, default ${HARNESS_PRESETS[n].defaultVersion})`).join(',\n  ')}

options:
  --harness-dir DIR   the store (default: $ROLLOUT_HARNESS_DIR, else
                      \${XDG_CACHE_HOME:-~/.cache}/rollout-runtime/harnesses; run and serve read
                      the same variable)
`;

/** `rollout harness ...`. Returns the exit code: 0, 1 on a failed operation (message on stderr), 2 on bad usage. */
export async function run(argv: string[]): Promise<number> {
  const flags = parseFlags('harness', argv, { 'harness-dir': { type: 'string' }, json: { type: 'boolean' } }, HELP, { positionals: true });
  if (typeof flags === 'number') return flags;
  const { values, positionals } = flags;
  const [sub, ...args] = positionals;
  const store = new HarnessStore(values['harness-dir'] ?? defaultHarnessStoreDir());
  const out = (s: string): boolean => process.stdout.write(s);
  return runOperation('harness', HELP, async () => {
    switch (sub) {
      case 'install': {
        if (args.length !== 1) throw new UsageError('harness install takes one NAME[@VERSION]');
        const { preset, version } = parseHarnessRef(args[0]!);
        const had = store.installed(preset, version);
        const t0 = performance.now();
        const rec = await store.install(preset, version, { log: (s) => process.stderr.write(s) });
        out(had ? `${preset}@${version} is already installed in ${rec.dir}\n` : `installed ${preset}@${version} (${rec.package}) in ${((performance.now() - t0) / 1000).toFixed(1)} s into ${rec.dir}\n`);
        return 0;
      }
      case 'ls': {
        const list = store.list();
        if (values.json) out(`${JSON.stringify(list)}\n`);
        else {
          out(`${'NAME'.padEnd(14)} ${'VERSION'.padEnd(12)} ${'PACKAGE'.padEnd(32)} INSTALLED\n`);
          for (const r of list) out(`${r.preset.padEnd(14)} ${r.version.padEnd(12)} ${r.package.padEnd(32)} ${r.installedAt}\n`);
        }
        return 0;
      }
      case 'rm': {
        if (args.length !== 1) throw new UsageError('harness rm takes one NAME[@VERSION]');
        const at = args[0]!.indexOf('@', 1);
        const { preset } = parseHarnessRef(at < 0 ? args[0]! : args[0]!.slice(0, at));
        const gone = store.remove(preset, at < 0 ? undefined : args[0]!.slice(at + 1));
        if (gone.length === 0) {
          process.stderr.write(`rollout harness rm: ${args[0]} is not installed in ${store.dir}\n`);
          return 1;
        }
        for (const r of gone) out(`removed ${r.preset}@${r.version}\n`);
        return 0;
      }
      default:
        throw new UsageError(`${sub ? `unknown harness command '${sub}'` : 'a harness command is required'}: one of install, ls, rm`);
    }
  });
}
