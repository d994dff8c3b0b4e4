#!/usr/bin/env bash
# Builds the test images as OCI image layouts, offline from Debian packages, into a cache dir.
#
#   scripts/build-test-images.sh [busybox|python|all] [--cache DIR] [--force]
#
#   busybox  <cache>/busybox-oci  two layers: busybox-static + bash (copied from the host with
#            the libraries it links) + a few files, then a layer that
#            deletes a file and replaces a directory (so the image carries real whiteouts).
#            Builds in about a second; the fast tests use it.
#   python   <cache>/python-oci   Debian bookworm minbase + python3, git, python3-pytest
#            (mmdebstrap, ~20 s plus download), then a layer with the sample repository of
#            examples/swe-sample/ at /testbed (a git repo at a fixed base commit).
#
# Default cache: $ROLLOUT_TEST_IMAGES, else ${XDG_CACHE_HOME:-$HOME/.cache}/rollout-runtime/test-images.
# A finished build is marked with a .ok file and reused; --force rebuilds. Prints each layout
# path on its own line. Needs root, umoci, busybox-static (busybox) and, for python, mmdebstrap.
set -euo pipefail

what=all
cache="${ROLLOUT_TEST_IMAGES:-${XDG_CACHE_HOME:-$HOME/.cache}/rollout-runtime/test-images}"
force=0
while (($#)); do
  case "$1" in
    busybox|python|all) what=$1; shift ;;
    --cache) cache=$2; shift 2 ;;
    --force) force=1; shift ;;
    -h|--help) sed -n '2,16p' "$0"; exit 0 ;;
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

build_python() {
  local out="$cache/python-oci"
  if [[ -f "$out/.ok" && $force -eq 0 ]]; then echo "$out"; return; fi
  command -v mmdebstrap >/dev/null || { echo "build-test-images: mmdebstrap is missing (apt-get install mmdebstrap)" >&2; exit 1; }
  rm -rf "$out" "$out.partial"
  local tmp; tmp=$(mktemp -d "$cache/.python.XXXXXX")
  mmdebstrap --quiet --variant=minbase --include=python3,git,python3-pytest --format=tar bookworm "$tmp/rootfs.tar"
  mkdir "$tmp/root"
  tar -C "$tmp/root" -xf "$tmp/rootfs.tar"
  rm "$tmp/rootfs.tar"
  umoci init --layout "$out.partial" >/dev/null
  umoci new --image "$out.partial:latest" >/dev/null
  add_layer "$out.partial" latest "$tmp/root"
  # Layer two: the sample repository at /testbed, at its base commit.
  mkdir -p "$tmp/root/testbed"
  cp -a "$here/examples/swe-sample/repo/." "$tmp/root/testbed/"
  git -C "$tmp/root/testbed" init -q -b main
  git -C "$tmp/root/testbed" add -A
  git -C "$tmp/root/testbed" commit -qm 'minilib: intervals and text helpers'
  git -C "$tmp/root/testbed" rev-parse HEAD >"$tmp/base_commit"
  add_layer "$out.partial" latest "$tmp/root"
  umoci config --image "$out.partial:latest" --config.env 'PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
    --config.env 'LANG=C.UTF-8' --config.workingdir /testbed --config.cmd /bin/bash >/dev/null
  cp "$tmp/base_commit" "$out.partial/base_commit"
  rm -rf "$tmp"
  umoci gc --layout "$out.partial"
  touch "$out.partial/.ok"
  mv "$out.partial" "$out"
  echo "$out"
}

[[ $(id -u) -eq 0 ]] || { echo "build-test-images: run as root (umoci and mmdebstrap keep file owners)" >&2; exit 1; }
case "$what" in
  busybox) build_busybox ;;
  python) build_python ;;
  all) build_busybox; build_python ;;
esac
