#!/usr/bin/env python3
"""Fetches NVIDIA's cuobjdump and nvdisasm (PyPI's nvidia-cuda-cuobjdump and nvidia-cuda-nvdisasm, pinned
by version and checksum) into tools/cuda-binutils/bin, where a machine with nvcc lacks them (Debian's CUDA
toolkit ships neither): the `matrix_units` test disassembles the CUDA kernels with them. Does nothing where
nvcc is absent (no CUDA kernels are built) or the tools are there already; where they cannot be fetched (no
network, a checksum that differs) it says so and the test is skipped, the build goes on. Standard library
only.

usage: fetch-cuda-binutils.py DEST_DIR
"""

import hashlib
import io
import json
import os
import shutil
import sys
import urllib.parse
import urllib.request
import zipfile

VERSION = "13.5.37"
WHEELS = {  # package -> sha256 of its x86_64 manylinux wheel
    "nvidia-cuda-cuobjdump": "38780fee50863252a0b8926357faa91615ca1c8346490563f33a06100cd73f58",
    "nvidia-cuda-nvdisasm": "d3fdbdd49fa53e2e4aacd3db8259d052bd2b049ececdcb69e92e083c6728e7ca",
}


def wheel_bytes(package, sha256):
    index = f"https://pypi.org/pypi/{package}/json"
    with urllib.request.urlopen(index, timeout=60) as response:
        files = json.load(response)["releases"].get(VERSION, [])
    for f in files:
        if f["digests"]["sha256"] == sha256:
            with urllib.request.urlopen(urllib.parse.urljoin(index, f["url"]), timeout=300) as response:
                data = response.read()
            if hashlib.sha256(data).hexdigest() != sha256:
                raise ValueError(f"{f['filename']}: checksum mismatch")
            return data
    raise ValueError(f"{package} {VERSION}: no wheel with the pinned checksum on PyPI")


def main():
    if len(sys.argv) != 2:
        sys.exit(__doc__.strip().splitlines()[-1])
    bin_dir = os.path.join(sys.argv[1], "bin")
    if shutil.which("nvcc") is None:
        return
    tools = ["cuobjdump", "nvdisasm"]
    if all(os.access(os.path.join(bin_dir, t), os.X_OK) for t in tools):
        return
    if os.uname().machine != "x86_64":
        print("fetch-cuda-binutils: only x86_64 wheels are pinned; the matrix_units test will be skipped")
        return
    print(f"fetch-cuda-binutils: fetching cuobjdump and nvdisasm {VERSION} from PyPI into {bin_dir}")
    os.makedirs(bin_dir, exist_ok=True)
    try:
        fetch(bin_dir, tools)
    except (OSError, ValueError, KeyError, zipfile.BadZipFile) as e:  # no network, no wheel: the test is skipped
        print(f"fetch-cuda-binutils: could not fetch them ({e}); the matrix_units test will be skipped")


def fetch(bin_dir, tools):
    for package, sha256 in WHEELS.items():
        with zipfile.ZipFile(io.BytesIO(wheel_bytes(package, sha256))) as wheel:
            for name in wheel.namelist():
                tool = os.path.basename(name)
                if "/bin/" in name and tool in tools:
                    target = os.path.join(bin_dir, tool)
                    with open(target + ".part", "wb") as out:
                        out.write(wheel.read(name))
                    os.chmod(target + ".part", 0o755)
                    os.replace(target + ".part", target)


if __name__ == "__main__":
    main()
