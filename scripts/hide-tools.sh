#!/usr/bin/env bash
# Runs a command as if the optional system tools the tests use were not installed (issue #28):
# every path test/helpers/system-tools.ts lists (bwrap, chromium, slirp4netns, attr, umoci,
# mmdebstrap, redis-server, busybox, zstd, fuse-overlayfs, chattr, Debian's pytest) is whited
# out, in a private mount namespace, so nothing changes for any other process on the machine.
#
#   scripts/hide-tools.sh COMMAND [ARGS...]
#   scripts/hide-tools.sh npx vitest run $(npx tsx test/helpers/system-tools-cli.ts tests)
#
# Each directory holding such a path gets an overlay over itself whose upper layer has a
# whiteout (a 0:0 character device) per hidden name, so the directory keeps every other entry
# and the tool reads as absent (ENOENT), as on a machine that never installed it. The upper
# layers live on a tmpfs of the namespace: nothing is left behind when the command exits.
# Every ROLLOUT_REQUIRE_* variable is unset (they turn a missing tool into a failure).
# Its scratch mount point is made in $TMPDIR (default /tmp) and removed on exit.
# Needs root (mount) and util-linux's unshare.
set -euo pipefail

if [[ "${1-}" != --inside ]]; then
  if (($# == 0)); then
    sed -n '2,9p' "$0" >&2
    exit 2
  fi
  cd "$(dirname "$0")/.."
  paths=$(npx --no-install tsx test/helpers/system-tools-cli.ts paths)
  scratch=$(mktemp -d "${TMPDIR:-/tmp}/rollout-hide-tools.XXXXXX")
  trap 'rmdir "$scratch"' EXIT
  rc=0
  HIDE_TOOLS_PATHS="$paths" unshare --mount --propagation private "$0" --inside "$scratch" "$@" || rc=$?
  exit "$rc"
fi

scratch=$2
shift 2
mount -t tmpfs -o mode=0700 rollout-hide-tools "$scratch"
declare -A dirs=()
while IFS= read -r p; do
  [[ -n $p ]] && dirs[$(dirname "$p")]+="$(basename "$p")"$'\n'
done <<<"$HIDE_TOOLS_PATHS"
i=0
for d in "${!dirs[@]}"; do
  i=$((i + 1))
  mkdir "$scratch/u$i" "$scratch/w$i"
  while IFS= read -r name; do
    [[ -n $name ]] && mknod "$scratch/u$i/$name" c 0 0
  done <<<"${dirs[$d]}"
  mount -t overlay "hide-tools-$i" -o "lowerdir=$d,upperdir=$scratch/u$i,workdir=$scratch/w$i" "$d"
done
unset HIDE_TOOLS_PATHS
for v in $(compgen -e); do
  [[ $v == ROLLOUT_REQUIRE_* ]] && unset "$v"
done
echo "hide-tools: whited out $(grep -c . <<<"$(printf '%s' "${dirs[@]}")") paths in ${#dirs[@]} directories" >&2
exec "$@"
