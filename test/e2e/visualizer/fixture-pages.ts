import type { Page } from 'playwright-core';
import { afterAll, afterEach, beforeAll } from 'vitest';
import { chromiumMissing, launchBrowser, type TestBrowser } from './browser.js';
import { startFixtureServer, type FixtureServer } from './fixture-server.js';

/** What {@link fixturePages} gives a browser test file. */
export interface FixturePages {
  /** Why the file skips (Debian's chromium is missing; test/helpers/system-tools.ts), or null. */
  readonly missing: string | null;
  /** The file's browser, launched before its first test. */
  browser(): TestBrowser;
  /** A fixture server (the real visualizer handler, recorded events), closed after the test. */
  server(opts?: Parameters<typeof startFixtureServer>[0]): Promise<FixtureServer>;
  /** A new page on `srv`'s visualizer (`suffix`: a hash or a query), closed after the test. */
  open(srv: FixtureServer, suffix?: string): Promise<Page>;
}

/**
 * The set-up every browser test file against the fixture server shares: one Debian chromium per
 * file, and per test the servers and pages it opened, closed after it. Call at the file's top level.
 */
export function fixturePages(): FixturePages {
  const missing = chromiumMissing();
  let browser: TestBrowser | undefined;
  const pages: Page[] = [];
  const servers: FixtureServer[] = [];
  beforeAll(async () => {
    if (!missing) browser = await launchBrowser();
  });
  afterAll(async () => {
    await browser?.close();
  });
  afterEach(async () => {
    for (const p of pages.splice(0)) await p.close();
    for (const s of servers.splice(0)) await s.close();
  });
  const launched = (): TestBrowser => {
    if (!browser) throw new Error('the browser is not launched (chromium missing, or called outside a test)');
    return browser;
  };
  return {
    missing,
    browser: launched,
    async server(opts) {
      const s = await startFixtureServer(opts);
      servers.push(s);
      return s;
    },
    async open(srv, suffix = '') {
      const page = await launched().context.newPage();
      pages.push(page);
      await page.goto(`${srv.url}/visualizer${suffix}`);
      return page;
    },
  };
}
