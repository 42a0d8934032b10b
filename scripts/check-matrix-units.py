#!/usr/bin/env python3
"""The CUDA kernels that must run on the tensor cores do, and keep their registers: for every GPU
architecture compiled into the given objects, each kernel named below has HMMA (or Hopper's HGMMA)
instructions in its SASS, and no local memory or stack frame (where ptxas puts spilled registers).
Prints each checked kernel's registers and shared memory. Exits 77 (skipped) without cuobjdump and
nvdisasm.

usage: check-matrix-units.py CUOBJDUMP OBJECT...
"""

import os
import re
import shutil
import subprocess
import sys

# Kernels (a substring of the mangled name: the bf16 instantiations) that must use the matrix units.
MATRIX_KERNELS = [
    "grouped_gemm_kernelIt",
    "grouped_weight_gradient_kernelIt",
    "attention_forward_matrix_kernel",
    "attention_dq_matrix_kernel",
    "attention_dkv_matrix_kernel",
]
MATRIX_OPS = re.compile(r"\b(HMMA|HGMMA)\.")


def run(cuobjdump, *args):
    env = dict(os.environ, PATH=os.path.dirname(cuobjdump) + os.pathsep + os.environ.get("PATH", ""))
    return subprocess.run([cuobjdump, *args], capture_output=True, text=True, check=True, env=env).stdout


def per_function(text, pattern):
    """{function: [lines]} of a cuobjdump listing."""
    functions, current = {}, None
    for line in text.splitlines():
        match = pattern.search(line)
        if match:
            current = match.group(1)
            functions[current] = []
        elif current is not None:
            functions[current].append(line)
    return functions


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__.strip().splitlines()[-1])
    cuobjdump, objects = sys.argv[1], sys.argv[2:]
    beside = os.path.join(os.path.dirname(cuobjdump), "nvdisasm")
    if not os.access(cuobjdump, os.X_OK) or not (os.access(beside, os.X_OK) or shutil.which("nvdisasm")):
        print(f"matrix_units: no cuobjdump and nvdisasm ({cuobjdump}): make deps fetches them where nvcc is; "
              "skipped")
        sys.exit(77)
    errors, seen = [], {k: 0 for k in MATRIX_KERNELS}
    for obj in objects:
        for arch in sorted(set(re.findall(r"\.(sm_\d+)\.cubin", run(cuobjdump, "-lelf", obj)))):
            sass = per_function(run(cuobjdump, "-sass", "-arch", arch, obj), re.compile(r"Function : (\S+)"))
            usage = per_function(run(cuobjdump, "-res-usage", "-arch", arch, obj), re.compile(r"Function (\S+):"))
            for name, lines in sass.items():
                kernel = next((k for k in MATRIX_KERNELS if k in name), None)
                if kernel is None:
                    continue
                seen[kernel] += 1
                where = f"{os.path.basename(obj)} {arch} {kernel}"
                if not any(MATRIX_OPS.search(line) for line in lines):
                    errors.append(f"{where}: no HMMA/HGMMA instruction: the matrix units are not used")
                resources = " ".join(usage.get(name, []))
                numbers = dict(re.findall(r"(\w+):(\d+)", resources))
                if not numbers:
                    errors.append(f"{where}: cuobjdump reports no resource usage")
                    continue
                print(f"{where}: {len([l for l in lines if MATRIX_OPS.search(l)])} matrix instructions, "
                      f"{numbers.get('REG')} registers, {numbers.get('SHARED')} bytes of shared memory, "
                      f"stack {numbers.get('STACK')}, local {numbers.get('LOCAL')}")
                if int(numbers.get("STACK", 0)) or int(numbers.get("LOCAL", 0)):
                    errors.append(f"{where}: a stack frame or local memory (spilled registers): {resources.strip()}")
    errors += [f"{k}: in none of the objects" for k, count in seen.items() if count == 0]
    for error in errors:
        print(f"matrix_units: {error}")
    sys.exit(1 if errors else 0)


if __name__ == "__main__":
    main()
