# Shared by the scripts: what syncmem needs from Debian, and installing it.
# Sourced, not run.

SYNCMEM_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
export SYNCMEM_ROOT

# Packages for building and testing (the CUDA toolkit is not among them: the
# CUDA build is made when nvcc is found, the CPU-only build always).
SYNCMEM_BUILD_PACKAGES=(build-essential cmake ninja-build pkg-config
  libgtest-dev libgmock-dev libbenchmark-dev libcli11-dev libfmt-dev libspdlog-dev nlohmann-json3-dev)
SYNCMEM_TEST_PACKAGES=(python3 python3-numpy chromium clang libclang-rt-dev)

log() { printf '\n==> %s\n' "$*"; }

# Installs the Debian packages given that are missing, when run as root.
ensure_packages() {
  local missing=()
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  if [ "$(id -u)" -ne 0 ]; then
    echo "syncmem: missing packages: ${missing[*]}; run as root or install them (apt-get install ${missing[*]})" >&2
    return 1
  fi
  log "installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq && apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# Puts nvcc on PATH when the toolkit is in its usual place.
find_cuda() {
  if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
    export PATH="/usr/local/cuda/bin:$PATH"
  fi
}

jobs() { nproc 2>/dev/null || echo 2; }

# configure_and_build DIR [cmake args...]
configure_and_build() {
  local dir="$1"
  shift
  cmake -S "$SYNCMEM_ROOT" -B "$dir" -G Ninja "$@" >"$dir.configure.log" 2>&1 ||
    { cat "$dir.configure.log"; return 1; }
  cmake --build "$dir" -j "$(jobs)"
}
