import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { chromium, type BrowserContext, type Page } from 'playwright-core';
import { CHROMIUM_PATH, missingTools } from '../../helpers/system-tools.js';

/** A headless Debian chromium with a fresh profile; `close()` removes the profile. */
export interface TestBrowser {
  context: BrowserContext;
  page: Page;
  /** Console errors and page errors seen so far. */
  errors: string[];
  close(): Promise<void>;
}

/** The Debian chromium the browser tests drive (`apt-get install chromium`); ROLLOUT_TEST_CHROMIUM overrides the path. */
export const CHROMIUM = CHROMIUM_PATH;

/**
 * Null when {@link CHROMIUM} is installed. Otherwise the reason the browser tests skip, printed
 * once as one line saying what to install — or, with ROLLOUT_REQUIRE_CHROMIUM=1 or
 * ROLLOUT_REQUIRE_TOOLS=1 (CI, which installs it), an error: there a missing browser fails the
 * run instead of skipping (test/helpers/system-tools.ts).
 */
export function chromiumMissing(): string | null {
  return missingTools('chromium');
}

/** Launches /usr/bin/chromium (never a downloaded browser) with a throwaway user-data-dir. */
export async function launchBrowser(): Promise<TestBrowser> {
  const profile = await mkdtemp(join(tmpdir(), 'viz-chromium-'));
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    viewport: { width: 1500, height: 950 },
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run', '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  const page = context.pages()[0] ?? (await context.newPage());
  const errors: string[] = [];
  page.on('pageerror', (err) => errors.push(String(err)));
  page.on('console', (msg) => {
    if (msg.type() === 'error') errors.push(msg.text());
  });
  return {
    context,
    page,
    errors,
    async close() {
      await context.close();
      await rm(profile, { recursive: true, force: true });
    },
  };
}
