#!/usr/bin/env bash
# Builds the test images as OCI image layouts, offline from Debian packages, into a cache dir.
#
#   scripts/build-test-images.sh [busybox|python|all] [--cache DIR] [--force]
#
#   busybox  <cache>/busybox-oci  two layers: busybox-static + bash (copied from the host with
#            the libraries it links) + a few files, then a layer that
#            deletes a file and replaces a directory (so the image carries real whiteouts).
#            Builds in about a second; the fast tests use it.
#   python   <cache>/python-oci   Debian bookworm's python3, python3-pytest, git, bash, coreutils,
#            util-linux and their dependencies (mmdebstrap --variant=extract, then the few
#            maintainer-script steps a sandbox needs), then a layer with the sample repository of
#            examples/swe-sample/ at /testbed (a git repo at a fixed base commit). ~1 min from an
#            empty cache, a third of it downloads (docs/images.md, Test images).
#
# Default cache: $ROLLOUT_TEST_IMAGES, else ${XDG_CACHE_HOME:-$HOME/.cache}/rollout-runtime/test-images.
# A finished build is marked with a .ok file and reused; --force rebuilds. Prints each layout
# path on its own line. Concurrent builds of one image (CI's background build and a test's
# beforeAll) take turns on a lock file: the second finds the first's result. Needs root, umoci,
# busybox-static (busybox) and, for python, mmdebstrap.
set -euo pipefail

what=all
cache="${ROLLOUT_TEST_IMAGES:-${XDG_CACHE_HOME:-$HOME/.cache}/rollout-runtime/test-images}"
force=0
while (($#)); do
  case "$1" in
    busybox|python|all) what=$1; shift ;;
    --cache) cache=$2; shift 2 ;;
    --force) force=1; shift ;;
    -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
    *) echo "build-test-images: unknown argument $1" >&2; exit 2 ;;
  esac
done

here="$(cd "$(dirname "$0")/.." && pwd)"
command -v umoci >/dev/null || { echo "build-test-images: umoci is missing (apt-get install umoci)" >&2; exit 1; }
mkdir -p "$cache"

# The sample repository's base commit: fixed identity and dates make its hash reproducible.
# examples/swe-sample/tasks.jsonl names this hash as base_commit.
export GIT_AUTHOR_NAME=minilib GIT_AUTHOR_EMAIL=minilib@example.invalid GIT_COMMITTER_NAME=minilib GIT_COMMITTER_EMAIL=minilib@example.invalid
export GIT_AUTHOR_DATE='2024-01-01T00:00:00Z' GIT_COMMITTER_DATE='2024-01-01T00:00:00Z'

# Turns a root directory into the next layer of an OCI layout: unpack the current top, replace its
# rootfs by the directory's content (with rsync-like delete semantics), repack.
add_layer() { # layout tag srcdir
  local layout=$1 tag=$2 src=$3 bundle
  bundle=$(mktemp -d "$cache/.bundle.XXXXXX")
  rmdir "$bundle"
  umoci unpack --image "$layout:$tag" "$bundle" >/dev/null
  find "$bundle/rootfs" -mindepth 1 -maxdepth 1 -exec rm -rf {} +
  cp -a "$src/." "$bundle/rootfs/"
  umoci repack --image "$layout:$tag" "$bundle" >/dev/null
  rm -rf "$bundle"
}

build_busybox() {
  local out="$cache/busybox-oci"
  if [[ -f "$out/.ok" && $force -eq 0 ]]; then echo "$out"; return; fi
  command -v busybox >/dev/null || { echo "build-test-images: busybox is missing (apt-get install busybox-static)" >&2; exit 1; }
  rm -rf "$out" "$out.partial"
  local tmp; tmp=$(mktemp -d "$cache/.busybox.XXXXXX")
  mkdir -p "$tmp/root/bin" "$tmp/root/etc" "$tmp/root/tmp" "$tmp/root/root" "$tmp/root/app/old" "$tmp/root/workspace"
  cp "$(command -v busybox)" "$tmp/root/bin/busybox"
  for app in $("$tmp/root/bin/busybox" --list); do [[ $app == busybox || $app == bash ]] || ln -s busybox "$tmp/root/bin/$app"; done
  # The sandbox's tool shell is bash (its prompt hook): the host's bash and the libraries it links.
  cp -L "$(command -v bash)" "$tmp/root/bin/bash"
  for lib in $(ldd "$(command -v bash)" | grep -o '/[^ ]*'); do cp -L --parents "$lib" "$tmp/root/"; done
  echo 'root:x:0:0:root:/root:/bin/sh' >"$tmp/root/etc/passwd"
  echo 'root:x:0:' >"$tmp/root/etc/group"
  echo 'layer one' >"$tmp/root/app/gone.txt"
  echo 'old content' >"$tmp/root/app/old/stale.txt"
  echo 'kept' >"$tmp/root/app/kept.txt"
  umoci init --layout "$out.partial" >/dev/null
  umoci new --image "$out.partial:latest" >/dev/null
  add_layer "$out.partial" latest "$tmp/root"
  # Layer two: a deleted file and a directory replaced by a new one (whiteout + opaque dir).
  rm "$tmp/root/app/gone.txt"
  rm -rf "$tmp/root/app/old"; mkdir "$tmp/root/app/old"; echo 'new content' >"$tmp/root/app/old/fresh.txt"
  echo 'layer two' >"$tmp/root/app/top.txt"
  add_layer "$out.partial" latest "$tmp/root"
  umoci config --image "$out.partial:latest" --config.env 'PATH=/bin' --config.env 'IMAGE_FLAVOUR=busybox' \
    --config.workingdir /app --config.user 0:0 --config.entrypoint /bin/sh >/dev/null
  rm -rf "$tmp"
  umoci gc --layout "$out.partial"
  touch "$out.partial/.ok"
  mv "$out.partial" "$out"
  echo "$out"
}

# The Python image's packages: what the SWE tests run (python3, python3-pytest, git) and what a
# sandbox needs inside (bash for the tool shell, coreutils & co. for the commands a policy
# types, util-linux's setpriv and python3 for the unshare driver, base-passwd's users, terminfo
# for the pty). apt resolves their dependencies (perl for git, libpython3.11-stdlib, ...).
python_packages=base-files,base-passwd,bash,dash,coreutils,diffutils,findutils,grep,sed,tar,gzip,ncurses-base,libc-bin,util-linux,git,python3,python3-pytest

# Work dir for the Python build: a tmpfs when one has room (the ~250 MB root is written,
# byte-compiled, tarred and deleted; on this VM's disk the deletion alone took 26 s), else the cache.
python_workdir() {
  local shm=/dev/shm avail
  avail=$(df -Pk "$shm" 2>/dev/null | awk 'NR==2 {print $4}')
  if [[ -n $avail && $avail -gt 1048576 && -w $shm ]]; then mktemp -d "$shm/rollout-python-image.XXXXXX"
  else mktemp -d "$cache/.python.XXXXXX"; fi
}

# The Python image's recipe, written into its .ok: a layout built by another recipe (say the
# minbase one, whose /dev nodes an unprivileged store cannot make) is rebuilt, not reused.
python_recipe='extract-2'
python_built() { [[ $force -eq 0 && -f "$1/.ok" && $(cat "$1/.ok") == "$python_recipe" ]]; }

build_python() {
  local out="$cache/python-oci"
  if python_built "$out"; then echo "$out"; return; fi
  exec {py_lock}>"$cache/.python-oci.lock"
  flock "$py_lock"
  if python_built "$out"; then echo "$out"; return; fi
  command -v mmdebstrap >/dev/null || { echo "build-test-images: mmdebstrap is missing (apt-get install mmdebstrap)" >&2; exit 1; }
  rm -rf "$out" "$out.partial"
  local tmp; tmp=$(python_workdir)
  # An interrupted build leaves neither its work dir (a tmpfs holds it in memory) nor a partial layout.
  py_cleanup=("$tmp" "$out.partial")
  trap 'rm -rf "${py_cleanup[@]}"' EXIT
  local root="$tmp/root"
  mkdir "$root"
  # Debian bookworm's packages, unpacked (variant extract: dpkg-deb, no maintainer scripts) into a
  # merged-/usr root. A full dpkg install of the same set (variant essential) cost 94 s of CPU
  # here against 23 s for this, nearly all of it dpkg's bookkeeping and the maintainer scripts of
  # ~90 packages; what those scripts do that a sandbox relies on is done below instead.
  mmdebstrap --quiet --variant=extract --include="$python_packages" \
    --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr --aptopt='Acquire::Languages "none"' \
    --format=directory bookworm "$root"
  # The maintainer scripts' work: base-passwd's preinst (passwd, group), base-files' postinst
  # (/etc/profile, root's dot files), libc-bin's ldconfig trigger, and the byte-compilation of
  # python3.11's and the Python packages' postinsts (a sandbox's uid cannot write __pycache__
  # under /usr, so without it every python3 start would compile its imports again).
  cp "$root/usr/share/base-passwd/passwd.master" "$root/etc/passwd"
  cp "$root/usr/share/base-passwd/group.master" "$root/etc/group"
  cp "$root/usr/share/base-files/profile" "$root/etc/profile"
  cp "$root/usr/share/base-files/dot.profile" "$root/root/.profile"
  cp "$root/usr/share/base-files/dot.bashrc" "$root/root/.bashrc"
  chroot "$root" /sbin/ldconfig
  # compileall -j0 (both cores) takes its process pool's semaphores in /dev/shm.
  mkdir -p "$root/dev/shm"
  chroot "$root" /usr/bin/python3 -m compileall -q -j0 /usr/lib/python3.11 /usr/lib/python3/dist-packages >/dev/null
  # What images leave out: docs, man pages, translations (copyright files kept); /dev's nodes
  # (the sandbox mounts its own /dev; a node in a layer would also stop an unprivileged store,
  # which cannot mknod, from importing the image); apt's state from the download.
  find "$root/usr/share/doc" -mindepth 1 ! -name copyright ! -type d -delete
  rm -rf "$root"/usr/share/{man,info,locale}/* "$root"/dev/* "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*
  # Layer one: the root as one tar (umoci raw add-layer: uncompressed in, gzip'd blob out).
  umoci init --layout "$out.partial" >/dev/null
  umoci new --image "$out.partial:latest" >/dev/null
  tar -C "$root" --numeric-owner --xattrs --sort=name -cf "$tmp/layer1.tar" .
  rm -rf "$root"
  umoci raw add-layer --image "$out.partial:latest" --history.created_by 'mmdebstrap --variant=extract bookworm' "$tmp/layer1.tar" >/dev/null
  rm "$tmp/layer1.tar"
  # Layer two: the sample repository at /testbed, at its base commit.
  mkdir -p "$tmp/tb/testbed"
  cp -a "$here/examples/swe-sample/repo/." "$tmp/tb/testbed/"
  git -C "$tmp/tb/testbed" init -q -b main
  git -C "$tmp/tb/testbed" add -A
  git -C "$tmp/tb/testbed" commit -qm 'minilib: intervals and text helpers'
  git -C "$tmp/tb/testbed" rev-parse HEAD >"$tmp/base_commit"
  tar -C "$tmp/tb" --owner=0 --group=0 --numeric-owner --sort=name -cf "$tmp/layer2.tar" testbed
  umoci raw add-layer --image "$out.partial:latest" --history.created_by 'sample repository at /testbed' "$tmp/layer2.tar" >/dev/null
  umoci config --image "$out.partial:latest" --config.env 'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --config.env 'LANG=C.UTF-8' --config.workingdir /testbed --config.cmd /bin/bash >/dev/null
  cp "$tmp/base_commit" "$out.partial/base_commit"
  rm -rf "$tmp"
  umoci gc --layout "$out.partial"
  echo "$python_recipe" >"$out.partial/.ok"
  rm -rf "$out"
  mv "$out.partial" "$out"
  trap - EXIT
  echo "$out"
}

[[ $(id -u) -eq 0 ]] || { echo "build-test-images: run as root (umoci and mmdebstrap keep file owners)" >&2; exit 1; }
case "$what" in
  busybox) build_busybox ;;
  python) build_python ;;
  all) build_busybox; build_python ;;
esac
