import { afterEach, describe, expect, it } from 'vitest';
import { serveVisualizer } from '../../../src/server/visualizer-assets.js';
import { startHarness, task, type Harness } from '../../unit/server/harness.js';
import { chromiumMissing, launchBrowser, type TestBrowser } from './browser.js';

/**
 * `rollout serve --token`: the visualizer opened as `/visualizer/?token=…` in a real browser
 * loads its own scripts and styles (a browser sends no token with them), connects its WebSocket
 * and shows a rollout submitted through the token-protected API (#28 §5.8). The API and the
 * WebSocket still refuse a client without the token.
 */
let h: Harness | undefined;
let browser: TestBrowser | undefined;
afterEach(async () => {
  await browser?.close();
  browser = undefined;
  await h?.close();
  h = undefined;
});

describe('the visualizer behind --token', () => {
  it.skipIf(chromiumMissing())('loads its JS and CSS, connects, and lists a rollout; the API still needs the token', async () => {
    h = await startHarness({ token: 's3cret' }, { visualizer: serveVisualizer });
    browser = await launchBrowser();
    const page = browser.page;
    const failed: string[] = [];
    page.on('response', (r) => {
      if (r.status() >= 400) failed.push(`${r.status()} ${new URL(r.url()).pathname}`);
    });
    await page.goto(`${h.url}/visualizer/?token=s3cret`);
    await page.waitForFunction(() => document.querySelector('#conn')?.getAttribute('data-state') === 'open');
    // The stylesheet applied: the header is laid out by style.css, not the browser's defaults.
    expect(await page.evaluate(() => getComputedStyle(document.querySelector('header')!).display)).toBe('flex');
    const res = await fetch(`${h.url}/v1/rollouts`, { method: 'POST', headers: { 'content-type': 'application/json', authorization: 'Bearer s3cret' }, body: JSON.stringify({ instance: task({ instance_id: 'token-viz' }) }) });
    expect(res.status).toBe(202);
    await page.waitForFunction(() => document.body.textContent?.includes('token-viz'));
    expect(failed).toEqual([]);
    expect(browser.errors).toEqual([]);
    // The data is still the token's: no token, no API.
    expect((await fetch(`${h.url}/v1/rollouts`)).status).toBe(401);
  });
});
