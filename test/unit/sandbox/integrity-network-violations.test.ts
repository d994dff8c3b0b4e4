import { describe, expect, it } from 'vitest';
import { networkViolations } from '../../../src/sandbox/integrity/host-integrity.js';

/** How one action's network attempts, as the observer drains them, become violations (#27). */
describe('networkViolations', () => {
  const none = { net: [], netMore: 0, netDropped: 0, netCapped: false };

  it('reports nothing for an action that tried nothing', () => {
    expect(networkViolations(3, none)).toEqual([]);
  });

  it('reports one violation per destination, with address, protocol, count and a DNS name', () => {
    const vs = networkViolations(2, { ...none, net: [{ proto: 'tcp', address: '203.0.113.7:443', count: 1 }, { proto: 'udp', address: '[2001:db8::53]:53', count: 3, name: 'pypi.org' }] });
    expect(vs).toEqual([
      { kind: 'network', turn: 2, address: '203.0.113.7:443', proto: 'tcp', detail: '1 TCP attempt to 203.0.113.7:443 refused: the sandbox has no network' },
      { kind: 'network', turn: 2, address: '[2001:db8::53]:53', proto: 'udp', detail: '3 UDP attempts to [2001:db8::53]:53 (a DNS query for pypi.org) refused: the sandbox has no network' },
    ]);
  });

  it('adds one violation without an address for the attempts past the listed destinations and the packets dropped', () => {
    const vs = networkViolations(1, { net: [{ proto: 'udp', address: '198.51.100.1:9', count: 5 }], netMore: 1200, netDropped: 80_000, netCapped: true });
    expect(vs).toHaveLength(2);
    expect(vs[1]).toEqual({
      kind: 'network',
      turn: 1,
      detail: "1200 more attempts to destinations past the first 20; 80000 packets dropped unread; the observer's packet budget (2000 a second) was spent (refused: the sandbox has no network)",
    });
  });

  it('says nothing of a spent budget when this action tried nothing (another sandbox spent it)', () => {
    expect(networkViolations(0, { ...none, netCapped: true })).toEqual([]);
  });
});
