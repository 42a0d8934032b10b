#!/usr/bin/env python3
"""Every GPU kernel's launches use the block size its launch bounds name (language.h, ZAYA_KERNEL).

A launch with more threads than the kernel's bound fails on a GPU only; the emulator cannot see bounds. So
the sources are read: each `launch("name", kernel, grid, {block})` must name, as its block, the same
constants as the kernel's `ZAYA_KERNEL(bound)` (a 2-D block {x, y} as the bound "x * y"; a kernel template's
parameters replaced by the launch's arguments). Prints each launch that differs as FILE:LINE and exits 1;
`make test` runs it (ctest's `launch_bounds`). Usage: check-launch-bounds.py [GPU_SOURCE_DIR]
"""
import pathlib
import re
import sys

KERNEL = re.compile(r"(?:template\s*<([^<>]*)>\s*)?ZAYA_KERNEL\(([^()]*)\)\s*void\s+(\w+)")
LAUNCH = re.compile(r"\blaunch\(\s*\"[^\"]*\",\s*([\w:]+)(?:<([^<>]*)>)?,\s*"
                    r"(\{[^{}]*\}|[\w:]+\((?:[^()]|\([^()]*\))*\)),\s*\{([^{}]*)\}")


def normal(text):
    return re.sub(r"\s+|\bgpu::", "", text)


def main():
    folder = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else pathlib.Path(__file__).parent.parent / "src/backend/gpu")
    sources = {path: path.read_text() for path in sorted(folder.glob("*.cu")) + sorted(folder.glob("*.h"))}
    kernels = {}  # name -> (template parameter names, bound)
    for text in sources.values():
        for parameters, bound, name in KERNEL.findall(text):
            names = [p.split()[-1].split("=")[0] for p in parameters.split(",") if p.strip()] if parameters else []
            kernels[name] = (names, bound)
    problems = launches = 0
    for path, text in sources.items():
        for match in LAUNCH.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            name = match.group(1).split("::")[-1]
            if name not in kernels:
                print(f"{path}:{line}: launches {name}, which is not declared with ZAYA_KERNEL(bound)")
                problems += 1
                continue
            launches += 1
            parameters, bound = kernels[name]
            arguments = [a.strip() for a in (match.group(2) or "").split(",") if a.strip()]
            for parameter, argument in zip(parameters, arguments):
                bound = re.sub(rf"\b{parameter}\b", argument, bound)
            block = [b.strip() for b in match.group(4).split(",")]
            while len(block) > 1 and block[-1] == "1":
                block.pop()
            if normal(" * ".join(block)) != normal(bound):
                print(f"{path}:{line}: {name} is launched with block {{{match.group(4)}}} but bounded by {bound}")
                problems += 1
    if launches == 0:
        print(f"{folder}: no kernel launches found")
        return 1
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
