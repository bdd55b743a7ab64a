# Shared by the scripts: what syncmem needs from Debian, and installing it.
# Sourced, not run.

SYNCMEM_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export SYNCMEM_ROOT

# Packages for building and testing (the CUDA toolkit is not among them: the
# CUDA build is made when nvcc is found, the CPU-only build always).
SYNCMEM_BUILD_PACKAGES=(build-essential cmake ninja-build pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev libfmt-dev libspdlog-dev nlohmann-json3-dev)
SYNCMEM_TEST_PACKAGES=(python3 python3-numpy python3-dev python3-venv chromium clang libclang-rt-dev)

log() { printf '\n==> %s\n' "$*"; }

# The command that stands for a tool package: a machine that has the command
# from elsewhere (cmake from PyPI, say) needs no package.
package_command() {
  case "$1" in
    build-essential) echo c++ ;;
    cmake) echo cmake ;;
    ninja-build) echo ninja ;;
    pkg-config) echo pkg-config ;;
    python3) echo python3 ;;
    clang) echo clang ;;
    chromium) echo chromium ;;
    *) echo "" ;;
  esac
}

# Debian packages carried in .deps/debs (scripts/fetch-gpu-deps), for a
# machine that cannot reach a package registry: unpacked into .deps/root and
# put on the paths. Sets cmake_prefix_args for the configure step.
cmake_prefix_args=()
use_carried_packages() {
  [ -d "$SYNCMEM_ROOT/.deps/debs" ] || return 0
  mkdir -p "$SYNCMEM_ROOT/.deps/root"
  for deb in "$SYNCMEM_ROOT"/.deps/debs/*.deb; do dpkg -x "$deb" "$SYNCMEM_ROOT/.deps/root"; done
  cmake_prefix_args=("-DCMAKE_PREFIX_PATH=$SYNCMEM_ROOT/.deps/root/usr")
  export LD_LIBRARY_PATH="$SYNCMEM_ROOT/.deps/root/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
  export PATH="$PATH:$SYNCMEM_ROOT/.deps/root/usr/bin"  # eu-stack, when the machine has none
}

# Installs the Debian packages given that are missing, when run as root. A
# package whose contents the machine has otherwise (its command on PATH, or
# carried in .deps) counts as present; when the registry cannot be reached the
# build goes on with what there is and says so.
ensure_packages() {
  local missing=() cmd
  for p in "$@"; do
    cmd=$(package_command "$p")
    [ -n "$cmd" ] && command -v "$cmd" >/dev/null 2>&1 && continue
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" && continue
    [ -d "$SYNCMEM_ROOT/.deps/debs" ] && compgen -G "$SYNCMEM_ROOT/.deps/debs/${p}_*.deb" >/dev/null && continue
    missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ]; then
    echo "syncmem: missing packages: ${missing[*]}; run as root or install them (apt-get install ${missing[*]})" >&2
    return 1
  fi
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  if ! { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null; }; then
    echo "syncmem: could not install ${missing[*]} (no package registry?); going on with what this machine has" >&2
  fi
}

# Puts nvcc on PATH when the toolkit is in its usual place.
find_cuda() {
  if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH="/usr/local/cuda/bin:$PATH"
  fi
}

jobs() { nproc 2>/dev/null || echo 2; }

# configure_and_build DIR [cmake args...] [-- TARGET...]
# Builds the named targets only, when there are any after "--"; else all.
configure_and_build() {
  local dir="$1"
  shift
  local args=() targets=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do
    args+=("$1")
    shift
  done
  [ $# -gt 0 ] && shift && targets=(--target "$@")
  cmake -S "$SYNCMEM_ROOT" -B "$dir" -G Ninja "${cmake_prefix_args[@]}" "${args[@]}" >"$dir.configure.log" 2>&1 ||
    { cat "$dir.configure.log"; return 1; }
  cmake --build "$dir" -j "$(jobs)" "${targets[@]}"
}
