import { describe, expect, it } from 'vitest';
import { TaskError } from '../../../../src/errors.js';
import { resolveUser } from '../../../../src/sandbox/images/image-user.js';

const PASSWD = 'root:x:0:0:root:/root:/bin/bash\n# comment\nbroken:line\napp:x:1000:1001:App:/home/app:/bin/sh\nnohome:x:7:8:::/bin/sh\n';
const GROUP = 'root:x:0:\nwheel:x:10:app\n';

describe('resolveUser (the image config User, Docker rules)', () => {
  it.each([
    [null, { uid: 0, gid: 0, home: '/root', name: 'root' }],
    ['', { uid: 0, gid: 0, home: '/root', name: 'root' }],
    ['app', { uid: 1000, gid: 1001, home: '/home/app', name: 'app' }],
    ['1000', { uid: 1000, gid: 1001, home: '/home/app', name: 'app' }],
    ['app:wheel', { uid: 1000, gid: 10, home: '/home/app', name: 'app' }],
    ['app:55', { uid: 1000, gid: 55, home: '/home/app', name: 'app' }],
    ['4242', { uid: 4242, gid: 0, home: '/', name: '4242' }],
    ['4242:4243', { uid: 4242, gid: 4243, home: '/', name: '4242' }],
    ['nohome', { uid: 7, gid: 8, home: '/', name: 'nohome' }],
  ])('User %j resolves to %j', (user, want) => {
    expect(resolveUser('img', user, PASSWD, GROUP)).toEqual(want);
  });

  it('uid 0 without a passwd file still has HOME /root', () => {
    expect(resolveUser('img', '0', null, null)).toEqual({ uid: 0, gid: 0, home: '/root', name: '0' });
  });

  it.each([
    ['ghost', "no user 'ghost'"],
    ['app:ghosts', "no group 'ghosts'"],
    ['99999999999', 'out of range'],
    ['app:99999999999', 'out of range'],
  ])('User %j is a TaskError IMAGE_USER_UNKNOWN naming the image and the problem', (user, problem) => {
    let err: unknown;
    try {
      resolveUser('py-test', user, PASSWD, GROUP);
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(TaskError);
    expect((err as TaskError).code).toBe('IMAGE_USER_UNKNOWN');
    expect((err as Error).message).toContain("image 'py-test'");
    expect((err as Error).message).toContain(problem);
  });
});
