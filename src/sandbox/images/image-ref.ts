/**
 * Docker references, one rule for the whole house: the image store finds an image by any of a
 * reference's forms, and Polar's `runtime.image` aliases match through the same normal form.
 */

/** A Docker reference in one form: no `docker://` transport, no `docker.io/` or `docker.io/library/` host, no `:latest` tag. */
export function normalizeImageRef(ref: string): string {
  let r = ref.trim().replace(/^docker:\/\//, '');
  r = r.replace(/^(?:index\.)?docker\.io\/(?:library\/)?/, '');
  if (!r.includes('@')) r = r.replace(/:latest$/, '');
  return r;
}

/**
 * The names an image a reference means may be stored under, most literal first: as written, its
 * normal form ({@link normalizeImageRef}), and each with and without `:latest` (an untagged
 * name means `:latest`; a digest reference has no tag to add).
 */
export function imageRefForms(ref: string): string[] {
  const norm = normalizeImageRef(ref);
  const forms = [ref, norm];
  for (const f of [ref, norm]) {
    if (f.includes('@')) continue;
    if (/:[^/]+$/.test(f)) forms.push(f.replace(/:latest$/, ''));
    else forms.push(`${f}:latest`);
  }
  return [...new Set(forms)];
}
