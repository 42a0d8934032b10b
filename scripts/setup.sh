#!/usr/bin/env bash
# Installs the Debian packages zaya needs to build, test and run its demo. Installs only what is
# missing, so a second run does nothing. Works as root or through sudo.
set -euo pipefail

packages=(
  cmake ninja-build g++ make pkg-config
  libdnnl-dev           # oneDNN: CPU matrix products
  libomp-dev            # OpenMP headers (libgomp ships with g++)
  libopenmpi-dev openmpi-bin
  nlohmann-json3-dev libtomlplusplus-dev libcli11-dev
  libgtest-dev libgmock-dev libbenchmark-dev
  zlib1g-dev libzstd-dev
  libonig-dev           # Oniguruma: the regex engine of Hugging Face tokenizers' pre-tokenizers
  libutf8proc-dev       # Unicode normalisation (NFC, NFKC) and categories for tokenizers
  python3.11-doc        # the default demo corpus: the Python documentation sources
)

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
[ ${#missing[@]} -eq 0 ] && exit 0

echo "zaya setup: installing ${missing[*]}"
sudo=""
if [ "$(id -u)" -ne 0 ]; then
  command -v sudo >/dev/null || { echo "zaya setup: need root or sudo to install: ${missing[*]}" >&2; exit 1; }
  sudo="sudo"
fi
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
