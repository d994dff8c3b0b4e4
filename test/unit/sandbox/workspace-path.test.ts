import { describe, expect, it } from 'vitest';
import { checkFileKeys, toWorkspacePath, workspaceParts } from '../../../src/sandbox/workspace-path.js';

describe('workspaceParts', () => {
  it('maps /workspace paths, relative paths and host workdir paths to components', () => {
    expect(workspaceParts('/workspace/src/a.py')).toEqual(['src', 'a.py']);
    expect(workspaceParts('src/./a.py')).toEqual(['src', 'a.py']);
    expect(workspaceParts('/workspace')).toEqual([]);
    expect(workspaceParts('/host/wd/src', '/host/wd')).toEqual(['src']);
    expect(toWorkspacePath(['src', 'a.py'])).toBe('/workspace/src/a.py');
  });

  it('refuses absolute paths elsewhere, .. escapes and NUL bytes', () => {
    expect(workspaceParts('/etc/passwd')).toBeNull();
    expect(workspaceParts('/workspace/../etc/passwd')).toBeNull();
    expect(workspaceParts('../outside')).toBeNull();
    expect(workspaceParts('a/../../b')).toBeNull();
    expect(workspaceParts('a\0b')).toBeNull();
    expect(workspaceParts('/host/wdx/a', '/host/wd')).toBeNull();
  });
});

describe('checkFileKeys', () => {
  it('accepts ordinary keys, nested ones and /workspace/ prefixes', () => {
    expect(checkFileKeys(['a.py', 'src/b.py', '/workspace/c/d.txt', 'x/../y.txt'])).toEqual([]);
  });

  it.each([
    ['.', /names the workspace root/],
    ['/workspace', /names the workspace root/],
    ['a/..', /names the workspace root/],
    ['', /is empty/],
    ['../escape', /escapes \/workspace/],
    ['/etc/passwd', /is outside \/workspace/],
    ['a\0b', /NUL byte/],
    ['dir/', /ends with \//],
    [`${'x'.repeat(256)}`, /component longer than 255 bytes \(256\)/],
    [`d/${'é'.repeat(128)}`, /component longer than 255 bytes \(256\)/],
    ['d/'.repeat(2048) + 'f', /longer than 4095 bytes/],
  ])('refuses the key %j', (key, problem) => {
    const bad = checkFileKeys([key]);
    expect(bad).toHaveLength(1);
    expect(bad[0]!.key).toBe(key);
    expect(bad[0]!.problem).toMatch(problem);
  });

  it('refuses a file that another key needs as a directory, and one file spelt twice', () => {
    expect(checkFileKeys(['a', 'a/b'])).toEqual([{ key: 'a', problem: 'is a file, but "a/b" needs it to be a directory' }]);
    expect(checkFileKeys(['x/y/z', 'x'])).toEqual([{ key: 'x', problem: 'is a file, but "x/y/z" needs it to be a directory' }]);
    expect(checkFileKeys(['a', './a'])).toEqual([{ key: './a', problem: 'names the same file as "a"' }]);
  });

  it('accepts a tree 2,000 levels deep within PATH_MAX', () => {
    expect(checkFileKeys(['d/'.repeat(2000) + 'f'])).toEqual([]);
  });
});
