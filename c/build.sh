#!/usr/bin/env bash
# Builds IREE's runtime, irgrad's C library and examples/c into one build folder, and prints
# the folder's path. A second run reuses it (only what changed is rebuilt).
#
#   c/build.sh [BUILD_DIR] [--aarch64]
#
# BUILD_DIR: default $IRGRAD_C_BUILD, else ~/.cache/irgrad/c-build/<host|aarch64>.
# IRGRAD_IREE_SOURCE: IREE's source folder or tarball (default: ../shared/iree-runtime's).
# --aarch64: cross-compile with aarch64-linux-gnu-gcc (Debian's gcc-aarch64-linux-gnu); the
#   host build (built first, into BUILD_DIR's sibling "host") lends it IREE's build tools.
# Needs CMake >= 3.26 (pip install cmake), ninja (or make) and a C compiler.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd -P)"
arch=host
build=""
for arg in "$@"; do
  case "$arg" in
    --aarch64) arch=aarch64 ;;
    *) build="$arg" ;;
  esac
done
root="${IRGRAD_C_BUILD:-${XDG_CACHE_HOME:-$HOME/.cache}/irgrad/c-build}"
if [ -z "$build" ]; then build="$root/$arch"; fi
jobs="${IRGRAD_C_JOBS:-$(nproc 2>/dev/null || echo 2)}"
generator=()
if command -v ninja >/dev/null; then generator=(-G Ninja); fi
# IREE's source: IRGRAD_IREE_SOURCE, else shared/iree-runtime beside the repository (or beside
# the main checkout, for a git worktree).
source="${IRGRAD_IREE_SOURCE:-}"
if [ -z "$source" ]; then
  repo="$(dirname "$here")"
  main_repo="$(dirname "$(git -C "$repo" rev-parse --path-format=absolute --git-common-dir 2>/dev/null || echo "$repo/.git")")"
  for candidate in "$repo/../shared/iree-runtime/iree-runtime-src.tar.xz" \
                   "$main_repo/../shared/iree-runtime/iree-runtime-src.tar.xz"; do
    if [ -f "$candidate" ]; then source="$(cd "$(dirname "$candidate")" && pwd)/$(basename "$candidate")"; break; fi
  done
fi
if [ -z "$source" ]; then
  echo "c/build.sh: IREE's source not found: set IRGRAD_IREE_SOURCE (docs/guides/embedding-c.md)" >&2
  exit 1
fi
source_flag=(-DIRGRAD_IREE_SOURCE="$source")
case "$source" in *iree-runtime-src.tar.xz) source_flag+=(-DIRGRAD_IREE_REVISION=b48a5955) ;; esac
targets=(irgrad irgrad_train iree_runtime_unified flatcc_parsing)

cross=()
if [ "$arch" = aarch64 ]; then
  host_build="$(dirname "$build")/host"
  "$0" "$host_build" >/dev/null
  cross=(-DCMAKE_TOOLCHAIN_FILE="$here/aarch64-linux-gnu.cmake"
         -DIREE_HOST_BIN_DIR="$host_build/iree/tools")
else
  targets+=(iree-flatcc-cli iree-c-embed-data irgrad_sanitized)
fi

# A build folder configured from another checkout's c/ (a clone since removed, another branch)
# would rebuild from that source, or fail where it is gone: start it afresh.
if [ -f "$build/CMakeCache.txt" ] \
   && [ "$(sed -n 's/^CMAKE_HOME_DIRECTORY:INTERNAL=//p' "$build/CMakeCache.txt")" != "$here" ]; then
  echo "c/build.sh: $build was configured for another checkout: building it afresh" >&2
  rm -rf "$build"
fi
if [ ! -f "$build/CMakeCache.txt" ]; then
  cmake -S "$here" -B "$build" "${generator[@]}" -DCMAKE_BUILD_TYPE=Release "${source_flag[@]}" "${cross[@]}" >&2
fi
cmake --build "$build" --target "${targets[@]}" -j "$jobs" >&2
echo "$build"
