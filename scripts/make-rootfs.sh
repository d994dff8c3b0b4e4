#!/usr/bin/env bash
# Builds a Debian minbase root filesystem with python3 and git for the bwrap driver's --rootfs,
# by mmdebstrap (about 20 s) or else debootstrap, into a cache folder. Prints the rootfs path on
# its last line.
#
#   scripts/make-rootfs.sh [--suite bookworm] [--mirror URL] [--cache DIR] [--force] [--include pkgs]
#
# The cache: /var/cache/rollout-runtime/rootfs as root (the sandboxes' unprivileged uids must
# reach it), else ${XDG_CACHE_HOME:-~/.cache}/rollout-runtime/rootfs.
#
# Then: createSandboxProvider({ rootfs: '<printed path>' }) (or the runtime's sandbox options).
# Needs root (the tools mknod and chroot) and the `mmdebstrap` or `debootstrap` package
# (apt-get install mmdebstrap). Re-running with the same options reuses the cached rootfs;
# concurrent runs take turns on a lock and the later ones reuse the first one's result.
set -euo pipefail

suite=bookworm
mirror=http://deb.debian.org/debian
# As root the sandboxes run as unprivileged uids, which must reach the rootfs: not under /root.
if [[ $(id -u) -eq 0 ]]; then cache=/var/cache/rollout-runtime/rootfs
else cache="${XDG_CACHE_HOME:-$HOME/.cache}/rollout-runtime/rootfs"
fi
include=python3,git,ca-certificates,procps,less
force=0

while (($#)); do
  case "$1" in
    --suite) suite=$2; shift 2 ;;
    --mirror) mirror=$2; shift 2 ;;
    --cache) cache=$2; shift 2 ;;
    --include) include=$2; shift 2 ;;
    --force) force=1; shift ;;
    -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
    *) echo "make-rootfs: unknown option $1" >&2; exit 2 ;;
  esac
done

if command -v mmdebstrap >/dev/null; then tool=mmdebstrap
elif command -v debootstrap >/dev/null; then tool=debootstrap
else echo "make-rootfs: mmdebstrap or debootstrap is missing (apt-get install mmdebstrap)" >&2; exit 1
fi
[[ $(id -u) -eq 0 ]] || { echo "make-rootfs: run as root (debootstrap needs it)" >&2; exit 1; }

key=$(printf '%s|%s|%s' "$suite" "$mirror" "$include" | sha256sum | cut -c1-12)
target="$cache/$suite-$key"
mkdir -p "$cache"
chmod o+x "$cache" "$(dirname "$cache")"
exec 9>"$target.lock"
flock 9
if [[ -f "$target/.rollout-rootfs-ok" && $force -eq 0 ]]; then
  echo "$target"
  exit 0
fi

rm -rf "$target.partial"
mkdir -p "$target.partial"
# A partial build never shadows a good one: build aside, then rename.
trap 'rm -rf "$target.partial"' EXIT
if [[ $tool == mmdebstrap ]]; then
  mmdebstrap --quiet --variant=minbase --include="$include" "$suite" "$target.partial" "$mirror" >&2
else
  debootstrap --variant=minbase --include="$include" "$suite" "$target.partial" "$mirror" >&2
fi
# The mount points bwrap binds over must exist in a read-only root.
mkdir -p "$target.partial/workspace" "$target.partial/run/rollout" "$target.partial/tmp"
rm -rf "$target.partial/var/cache/apt/archives/"*.deb "$target.partial/var/lib/apt/lists/"* || true
touch "$target.partial/.rollout-rootfs-ok"
rm -rf "$target"
mv "$target.partial" "$target"
trap - EXIT
echo "$target"
