import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ValidationError } from '../../../../src/errors.js';
import { ImageStore } from '../../../../src/sandbox/images/image-store.js';
import { imageRefForms, normalizeImageRef } from '../../../../src/sandbox/images/image-ref.js';
import { importHint, requireLocalImage, taskImage } from '../../../../src/server/polar/task-image.js';
import { tarOf, writeOciLayout } from '../../../helpers/images/oci-fixture.js';

describe('taskImage', () => {
  const aliases = { 'python:3.11': 'py-test', 'ghcr.io/acme/swe:7': 'swe-7' };
  const table: { name: string; image: string | null; policy?: 'strict' | 'ignore'; aliases?: Record<string, string>; ref: string | null; aliased: boolean }[] = [
    { name: 'no image', image: null, ref: null, aliased: false },
    { name: 'an image with no alias', image: 'py-test', ref: 'py-test', aliased: false },
    { name: 'an aliased image, as written', image: 'python:3.11', aliases, ref: 'py-test', aliased: true },
    { name: "an aliased image in Docker Hub's long form", image: 'docker.io/library/python:3.11', aliases, ref: 'py-test', aliased: true },
    { name: 'an aliased image under the docker:// transport', image: 'docker://ghcr.io/acme/swe:7', aliases, ref: 'swe-7', aliased: true },
    { name: 'an image no alias names, without a catch-all', image: 'ubuntu:22.04', aliases, ref: 'ubuntu:22.04', aliased: false },
    { name: 'an image no alias names, with a catch-all', image: 'ubuntu:22.04', aliases: { ...aliases, '*': 'py-test' }, ref: 'py-test', aliased: true },
    { name: 'a named alias before the catch-all', image: 'ghcr.io/acme/swe:7', aliases: { ...aliases, '*': 'py-test' }, ref: 'swe-7', aliased: true },
    { name: 'the docker:// transport without an alias', image: 'docker://ubuntu:22.04', ref: 'ubuntu:22.04', aliased: false },
    { name: 'any image under --polar-image ignore', image: 'python:3.11', policy: 'ignore', aliases, ref: null, aliased: false },
  ];
  for (const row of table) {
    it(`maps ${row.name} to ${row.ref === null ? 'the default root' : `the store image ${row.ref}`}`, () => {
      expect(taskImage(row.image, row.policy ?? 'strict', row.aliases ?? {})).toEqual({ requested: row.image, ref: row.ref, aliased: row.aliased });
    });
  }

  it.each(['/images/swe.sif', './layout', 'oci:/srv/layout:1', 'docker-archive:/tmp/x.tar', '~/img'])('refuses the host path %s naming runtime.image', (image) => {
    let err: unknown;
    try {
      taskImage(image, 'strict', {});
    } catch (e) {
      err = e;
    }
    expect(err).toBeInstanceOf(ValidationError);
    expect((err as ValidationError).issues[0]).toMatchObject({ path: 'runtime.image', message: expect.stringContaining('rollout image import') });
  });

  it('lets --polar-image ignore drop a path too', () => {
    expect(taskImage('/images/swe.sif', 'ignore', {}).ref).toBeNull();
  });

  it('normalises Docker references to one form', () => {
    expect(['docker.io/library/python:latest', 'python:latest', 'docker://python', 'index.docker.io/library/python'].map(normalizeImageRef)).toEqual(['python', 'python', 'python', 'python']);
    expect(normalizeImageRef('docker.io/acme/x:1')).toBe('acme/x:1');
    expect(normalizeImageRef('python@sha256:abc')).toBe('python@sha256:abc');
  });

  it('gives the image store every name a reference may be stored under, by the same rule', () => {
    expect(imageRefForms('docker.io/library/python:3.11')).toEqual(['docker.io/library/python:3.11', 'python:3.11']);
    expect(imageRefForms('docker.io/acme/x')).toEqual(['docker.io/acme/x', 'acme/x', 'docker.io/acme/x:latest', 'acme/x:latest']);
    expect(imageRefForms('acme/x:latest')).toEqual(['acme/x:latest', 'acme/x']);
    expect(imageRefForms('python@sha256:abc')).toEqual(['python@sha256:abc']);
  });

  it('tells how to import the image, or how to fix the alias that named it', () => {
    expect(importHint(taskImage('ubuntu:22.04', 'strict', {}))).toMatch(/rollout image import PATH --name ubuntu:22\.04.*--image-alias ubuntu:22\.04=NAME/);
    expect(importHint(taskImage('python:3.11', 'strict', { 'python:3.11': 'py' }))).toMatch(/--name py\b.*the alias that maps runtime\.image 'python:3\.11'/);
  });
});

describe('requireLocalImage', () => {
  let root: string;
  let store: ImageStore;
  beforeAll(async () => {
    root = mkdtempSync(join(tmpdir(), 'polar-image-unit-'));
    writeOciLayout(join(root, 'layout'), [tarOf([{ name: 'etc/', type: '5' }, { name: 'etc/marker', content: 'x\n' }])]);
    store = new ImageStore(join(root, 'store'));
    await store.import(join(root, 'layout'), { name: 'ghcr.io/acme/swe:7' });
  });
  afterAll(() => rmSync(root, { recursive: true, force: true }));

  it('passes an image the store has, in any form the store finds, and no image at all', () => {
    for (const image of ['ghcr.io/acme/swe:7', 'docker://ghcr.io/acme/swe:7']) expect(() => requireLocalImage(taskImage(image, 'strict', {}), store.dir)).not.toThrow();
    expect(() => requireLocalImage(taskImage(null, 'strict', {}), store.dir)).not.toThrow();
    expect(() => requireLocalImage(taskImage('gone', 'ignore', {}), store.dir)).not.toThrow();
  });

  it('refuses an image the store lacks with a ValidationError naming runtime.image and the import command', () => {
    expect(() => requireLocalImage(taskImage('ghcr.io/acme/swe:8', 'strict', {}), store.dir)).toThrow(ValidationError);
    try {
      requireLocalImage(taskImage('python:3.11', 'strict', { 'python:3.11': 'py-missing' }), store.dir);
    } catch (e) {
      expect((e as ValidationError).issues).toEqual([{ path: 'runtime.image', message: expect.stringMatching(/^image 'py-missing' is not in this server's image store; import it with `rollout image import PATH --name py-missing`/) }]);
    }
    expect.assertions(2);
  });

  it('refuses an image whose store does not exist yet', () => {
    expect(() => requireLocalImage(taskImage('x', 'strict', {}), join(root, 'no-store'))).toThrow(ValidationError);
  });
});
