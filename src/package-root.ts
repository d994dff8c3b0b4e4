import { existsSync, readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * The package's own directory: the nearest ancestor of this module holding the package.json of
 * `rollout-runtime`. The same answer whether the sources run through tsx from a clone
 * (`src/package-root.ts`, one level down) or the build runs under plain Node from an installed
 * tarball (`dist/src/package-root.js`, two levels down), so files shipped beside the code
 * (`bin/rollout.js`, `visualizer/`, `package.json`) are found in both. Throws Error when no such
 * ancestor exists (a broken install).
 */
export const PACKAGE_ROOT: string = findPackageRoot(dirname(fileURLToPath(import.meta.url)));

/** A path inside the package: `packagePath('bin', 'rollout.js')`. */
export function packagePath(...segments: string[]): string {
  return join(PACKAGE_ROOT, ...segments);
}

function findPackageRoot(start: string): string {
  for (let dir = start; ; dir = dirname(dir)) {
    const manifest = join(dir, 'package.json');
    if (existsSync(manifest)) {
      try {
        if ((JSON.parse(readFileSync(manifest, 'utf8')) as { name?: unknown }).name === 'rollout-runtime') return dir;
      } catch {
        // not ours (or unreadable): keep walking up
      }
    }
    if (dirname(dir) === dir) throw new Error(`rollout-runtime: no package.json of rollout-runtime above ${start}`);
  }
}
