#!/usr/bin/env python3
"""The daemon's layers, checked: every #include of a daemon header names a
folder at or below the including file's layer (daemon/CMakeLists.txt), MPI
is included only in world/, Gloo only in gloo/, and gRPC's server only in
service/ and the folder that wires the daemon. Fails with every violation listed. The build
runs it before any daemon layer compiles (daemon/CMakeLists.txt), and ctest
as `daemon_layering`."""
import pathlib
import re
import sys

# Each layer and what it may include besides itself, lowest first.
BELOW = {
    "job": set(),
    "negotiation": {"job"},
    "exec": {"job", "negotiation"},
    "gpu": {"job", "negotiation", "exec"},
    "world": {"job", "negotiation", "exec", "gpu"},
    "gloo": {"job", "negotiation", "exec"},
    "observe": {"job", "negotiation", "exec"},
    "tune": set(),
    "engine": {"job", "negotiation", "exec", "gpu", "world", "gloo", "observe", "tune"},
    "service": {"job", "negotiation", "exec", "gpu", "world", "gloo", "observe", "tune", "engine"},
}
# The kernels are a leaf library (collective_kernels) every layer may use.
LEAF = {"daemon/exec/reduce_kernels.h", "daemon/exec/adasum_kernel.h"}
ONLY_IN = {
    re.compile(r"#include\s*<mpi\.h>"): {"world"},
    re.compile(r"#include\s*<gloo/"): {"gloo"},
    re.compile(r"#include\s*<grpcpp/"): {"service", "."},
}


def layer_of(path, daemon):
    parts = path.relative_to(daemon).parts
    return parts[0] if len(parts) > 1 else "."


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    daemon = root / "daemon"
    problems = []
    files = [p for p in daemon.rglob("*") if p.suffix in (".h", ".cc", ".cu")]
    if not files:
        problems.append(f"no daemon sources under {daemon}")
    for path in sorted(files):
        layer = layer_of(path, daemon)
        text = path.read_text()
        name = path.relative_to(root)
        if layer != "." and layer not in BELOW:
            problems.append(f"{name}: folder '{layer}' is not a known layer")
            continue
        for included in re.findall(r'#include\s*"(daemon/[^"]+)"', text):
            if included in LEAF:
                continue
            target = included.split("/")[1] if included.count("/") > 1 else "."
            if layer == "." or target == layer:
                continue
            if target not in BELOW[layer]:
                problems.append(f"{name}: layer '{layer}' includes {included} (layer '{target}')")
        for pattern, allowed in ONLY_IN.items():
            if pattern.search(text) and layer not in allowed:
                problems.append(f"{name}: {pattern.pattern} outside {sorted(allowed)}")
    for problem in problems:
        print(problem)
    print(f"{len(files)} files checked, {len(problems)} layering violations")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
