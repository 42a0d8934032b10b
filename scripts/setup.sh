#!/usr/bin/env bash
# Installs the Debian packages zaya needs to build, test and run its demo. Installs only what is
# missing, so a second run does nothing. Works as root or through sudo. After changing it, run the
# fresh-machine check (docs/CONTRIBUTING.md).
set -euo pipefail

packages=(
  cmake ninja-build g++ make pkg-config
  libdnnl-dev           # oneDNN: CPU matrix products
  ocl-icd-opencl-dev    # OpenCL headers and library: Debian's oneDNN CMake config requires them (it is built
                        # with the OpenCL GPU runtime) but libdnnl-dev only recommends them
  libomp-dev            # OpenMP headers (libgomp ships with g++)
  libopenmpi-dev openmpi-bin
  nlohmann-json3-dev libtomlplusplus-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  clang libclang-rt-14-dev  # the libFuzzer targets (fuzz/): clang and its fuzzer runtime
  zlib1g-dev libzstd-dev
  libonig-dev           # Oniguruma: the regex engine of Hugging Face tokenizers' pre-tokenizers
  libutf8proc-dev       # Unicode normalisation (NFC, NFKC) and categories for tokenizers
  curl                  # the client of the serve test
  slowhttptest          # slowloris and slow-body clients against zaya serve (tests/integration/serve_hostile_test.sh)
  iproute2              # network namespaces: the hosts of the hosts test
  munge slurmctld slurmd slurm-client  # a Slurm cluster of our own for the slurm test (its daemons start
                        # only where /etc/slurm/slurm.conf exists; the test runs its own)
  strace                # fault injection: the train test kills zaya prepare at each of its commits
  hipcc libamdhip64-dev # HIP: the GPU kernels compiled for AMD (gfx90a, gfx940) in every build
  python3.11-doc        # the default demo corpus: the Python documentation sources
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && { echo "zaya setup: all ${#packages[@]} packages are installed"; exit 0; }

echo "zaya setup: installing ${#missing[@]} Debian packages and what they need (a few minutes from nothing): ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "zaya setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
# apt's own progress is a line per package fetched and per package set up; print a count every 25 of each
# so that the few minutes this takes from nothing never look hung.
$sudo apt-get install -y -q --no-install-recommends "${missing[@]}" |
  awk '/^Get:/ { g++; if (g % 25 == 0) printf "zaya setup: %d packages downloaded\n", g; fflush() }
       /^Setting up / { n++; if (n % 25 == 0) printf "zaya setup: %d packages set up\n", n; fflush() }
       END { printf "zaya setup: done, %d packages set up\n", n }'
