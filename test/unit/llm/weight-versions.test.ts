import { describe, expect, it } from 'vitest';
import { compareVersions, firstRegression, isWeightVersion, staleness, versionRange, versionRuns } from '../../../src/llm/weight-versions.js';

const turn = (weightVersion: string | number | null, n: number) => ({ weightVersion, outputIds: new Array<number>(n).fill(1) });

describe('weight versions', () => {
  it.each([
    [1, 2, -1],
    [10, 9, 1],
    [3, 3, 0],
    ['a', 'b', -1],
    ['v10', 'v9', -1],
    [10, '9', -1],
    ['x', 'x', 0],
  ] as const)('compareVersions(%j, %j) has the sign %d', (a, b, sign) => {
    expect(Math.sign(compareVersions(a, b))).toBe(sign);
  });

  it.each([
    ['no turns', [], []],
    ['one turn', [turn(1, 3)], [{ version: 1, tokens: 3 }]],
    ['merges equal neighbours', [turn(1, 3), turn(1, 2), turn(2, 4)], [{ version: 1, tokens: 5 }, { version: 2, tokens: 4 }]],
    ['skips empty turns', [turn(1, 3), turn(2, 0), turn(1, 1)], [{ version: 1, tokens: 4 }]],
    ['keeps unknown versions as null runs', [turn(null, 2), turn(1, 1)], [{ version: null, tokens: 2 }, { version: 1, tokens: 1 }]],
  ])('versionRuns: %s', (_name, turns, runs) => {
    expect(versionRuns(turns)).toEqual(runs);
  });

  it.each([
    [[], null, null],
    [[{ version: null, tokens: 2 }], null, null],
    [[{ version: 3, tokens: 1 }, { version: null, tokens: 1 }, { version: 5, tokens: 1 }], 3, 5],
    [[{ version: 'b', tokens: 1 }, { version: 'a', tokens: 1 }], 'a', 'b'],
  ])('versionRange(%j) is [%j, %j]', (runs, min, max) => {
    expect(versionRange(runs)).toEqual({ min, max });
  });

  it.each([
    [[], -1],
    [[1, 1, 2, 3], -1],
    [[1, null, 2, null, 2], -1],
    [[2, 1], 1],
    [[1, 3, null, 2], 3],
    [['b', 'a'], 1],
  ])('firstRegression(%j) = %d', (vs, i) => {
    expect(firstRegression(vs)).toBe(i);
  });

  it.each([
    [5, 3, 2],
    [3, 3, 0],
    [2, 3, -1],
    [null, 3, null],
    [5, null, null],
    ['x', 'x', 0],
    ['x', 'y', null],
    [5, '3', null],
  ])('staleness(trainer %j, oldest %j) = %j', (t, o, s) => {
    expect(staleness(t, o)).toBe(s);
  });

  it.each([[1, true], [0, true], ['v1', true], ['', false], [Number.NaN, false], [null, false], [{}, false], ['x'.repeat(201), false]])('isWeightVersion(%j) = %j', (v, ok) => {
    expect(isWeightVersion(v)).toBe(ok);
  });
});
