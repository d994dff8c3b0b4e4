import { parseFlags, runOperation, UsageError } from '../args.js';
import { defaultImageStoreDir, ImageStore } from '../../sandbox/images/image-store.js';

const HELP = `usage: rollout image <import|ls|rm|prune> [options]

  rollout image import PATH [--name NAME]   import an OCI image layout dir (PATH or PATH:TAG) or a
                                            docker save / docker-archive tarball; each layer is
                                            unpacked once into the store, keyed by its digest
  rollout image ls [--json]                 images, most recently used first
  rollout image rm NAME                     forget a name (the image goes with its last name)
  rollout image prune [--max-size SIZE] [--unused-for DURATION]
                                            drop least recently used images until the layers fit
                                            in SIZE (e.g. 20G) and images unused for DURATION
                                            (e.g. 7d, 12h); then layers no image names

options:
  --image-store DIR   the store (default: $ROLLOUT_IMAGE_STORE, else
                      \${XDG_CACHE_HOME:-~/.cache}/rollout-runtime/images; run and serve use the same)
`;

/** `rollout image ...`. Returns the exit code: 0, 1 on a failed operation (message on stderr), 2 on bad usage. */
export async function run(argv: string[]): Promise<number> {
  const flags = parseFlags(
    'image',
    argv,
    { name: { type: 'string' }, 'image-store': { type: 'string' }, json: { type: 'boolean' }, 'max-size': { type: 'string' }, 'unused-for': { type: 'string' } },
    HELP,
    { positionals: true },
  );
  if (typeof flags === 'number') return flags;
  const { values, positionals } = flags;
  const [sub, ...args] = positionals;
  const store = new ImageStore(values['image-store'] ?? defaultImageStoreDir());
  const out = (s: string): boolean => process.stdout.write(s);
  return runOperation('image', HELP, async () => {
    switch (sub) {
      case 'import': {
        if (args.length !== 1) throw new UsageError('image import takes one PATH');
        const t0 = performance.now();
        const rec = await store.import(args[0]!, { name: values.name });
        out(`imported ${rec.names.join(', ')} ${rec.id} (${rec.layers.length} layers, ${mb(rec.bytes)}) in ${((performance.now() - t0) / 1000).toFixed(1)} s into ${store.dir}\n`);
        return 0;
      }
      case 'ls': {
        const list = store.list();
        if (values.json) out(`${JSON.stringify(list)}\n`);
        else {
          out(`${'NAME'.padEnd(48)} ${'ID'.padEnd(14)} ${'LAYERS'.padStart(6)} ${'SIZE'.padStart(10)}  LAST USED\n`);
          for (const r of list) for (const n of r.names) out(`${n.padEnd(48)} ${r.id.slice(7, 19).padEnd(14)} ${String(r.layers.length).padStart(6)} ${mb(r.bytes).padStart(10)}  ${r.lastUsedAt}\n`);
        }
        return 0;
      }
      case 'rm': {
        if (args.length !== 1) throw new UsageError('image rm takes one NAME');
        if (!store.remove(args[0]!)) {
          process.stderr.write(`rollout image rm: no image '${args[0]}' in ${store.dir}\n`);
          return 1;
        }
        out(`removed ${args[0]}\n`);
        return 0;
      }
      case 'prune': {
        const maxBytes = values['max-size'] !== undefined ? size(values['max-size']) : undefined;
        const unusedForMs = values['unused-for'] !== undefined ? duration(values['unused-for']) : undefined;
        const r = store.prune({ maxBytes, unusedForMs });
        out(`pruned ${r.images.length} images and ${r.layers.length} layers (${mb(r.bytesFreed)}); ${mb(r.bytesLeft)} left in ${store.dir}\n`);
        return 0;
      }
      default:
        throw new UsageError(`${sub ? `unknown image command '${sub}'` : 'an image command is required'}: one of import, ls, rm, prune`);
    }
  });
}

function mb(bytes: number): string {
  return `${(bytes / 1024 ** 2).toFixed(1)} MB`;
}

/** `20G`, `500M`, `1.5T`, or plain bytes. */
function size(v: string): number {
  const m = /^(\d+(?:\.\d+)?)([KMGT]?)i?B?$/i.exec(v.trim());
  if (!m) throw new UsageError(`--max-size must be a size like 20G or 500M, got '${v}'`);
  const pow = { '': 0, K: 1, M: 2, G: 3, T: 4 }[m[2]!.toUpperCase() as '' | 'K' | 'M' | 'G' | 'T'];
  return Math.floor(Number(m[1]) * 1024 ** pow);
}

/** `7d`, `12h`, `30m`, `45s`. */
function duration(v: string): number {
  const m = /^(\d+(?:\.\d+)?)([smhd])$/.exec(v.trim());
  if (!m) throw new UsageError(`--unused-for must be a duration like 7d, 12h or 30m, got '${v}'`);
  return Number(m[1]) * { s: 1000, m: 60_000, h: 3_600_000, d: 86_400_000 }[m[2] as 's' | 'm' | 'h' | 'd'];
}
