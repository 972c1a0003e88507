#!/usr/bin/env python3
"""The one-way dependency graph of lib/, checked on the sources (ctest `layering`).

Every module is a build target of its own (lib/<module>/CMakeLists.txt), but all of them share
lib/ as the include root, so an #include of another module's header compiles whether or not the
module links it. This check reads every source and header under lib/<module>/ and fails on:
  - an #include "M/..." of a module M that <module> may not depend on (the graph below, taken
    transitively: train may include tensor/ through nn);
  - an #include of another module's internals: its cpu/ or cuda/ folders (data decodes huffgpu
    streams through huffman's public stream.h, not huffman/cpu/);
  - with --binaries DIR: a codec tool (huffgpu-encode/-decode) that links oneDNN, protobuf,
    libonnx or MPI (from readelf -d).
Tools, tests, benchmarks and fuzz targets may include anything.

usage: check_layering.py [--root DIR] [--binaries BUILD_DIR] [--self-test]
--self-test plants a wrong include (lib/dist including nn/model.h) in a copy of lib/ and checks
that the check fails on it, then that it passes on the copy without it.
"""
import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile

# module -> the modules it may include directly (DESIGN.md, "Dependency direction").
GRAPH = {
    "core": [],
    "onnx": ["core"],
    "tensor": ["core"],
    "huffman": ["core"],
    "dist": ["core"],
    "ops": ["tensor"],
    "nn": ["ops", "onnx"],
    "prune": ["onnx"],
    "fcl": ["onnx"],
    "data": ["core", "tensor", "huffman"],
    "spatial": ["nn", "dist"],
    "measure": ["nn", "data", "dist", "onnx", "spatial"],
    "train": ["measure", "nn", "data", "dist", "onnx"],
    "bn": ["measure"],
}
INTERNAL = ("cpu", "cuda")  # folders private to their module
INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
CODEC_TOOLS = ("huffgpu-encode", "huffgpu-decode")
MEASURING_TOOLS = ("prune-rate", "sparsify-fcl", "bn-polish")  # read training data, never train
FORBIDDEN_LIBS = ("libdnnl", "libprotobuf", "libonnx", "libmpi")


def allowed(module):
    seen, todo = set(), [module]
    while todo:
        m = todo.pop()
        for d in GRAPH.get(m, []):
            if d not in seen:
                seen.add(d)
                todo.append(d)
    return seen | {module}


def check_sources(lib):
    problems = []
    modules = sorted(d for d in os.listdir(lib) if os.path.isdir(os.path.join(lib, d)))
    for module in modules:
        if module not in GRAPH:
            problems.append(f"lib/{module}/: a module the graph in tests/tools/check_layering.py does not know")
            continue
        ok = allowed(module)
        for folder, _, files in os.walk(os.path.join(lib, module)):
            for f in sorted(files):
                if not f.endswith((".h", ".cpp", ".cu", ".cuh")):
                    continue
                path = os.path.join(folder, f)
                rel = os.path.relpath(path, os.path.dirname(lib))
                with open(path, encoding="utf-8", errors="replace") as fh:
                    text = fh.read()
                for m in INCLUDE.finditer(text):
                    inc = m.group(1)
                    parts = inc.split("/")
                    if len(parts) < 2 or parts[0] not in GRAPH:
                        continue  # same-folder or generated headers
                    line = text.count("\n", 0, m.start()) + 1
                    if parts[0] not in ok:
                        problems.append(f"{rel}:{line}: lib/{module} includes \"{inc}\", but {module} may depend only on "
                                        f"{', '.join(sorted(ok - {module})) or 'nothing'}")
                    elif parts[0] != module and len(parts) > 2 and parts[1] in INTERNAL:
                        problems.append(f"{rel}:{line}: lib/{module} includes \"{inc}\", an internal header of {parts[0]} "
                                        f"(use its public API)")
    return problems


def check_binaries(build):
    problems = []
    for tool in CODEC_TOOLS:
        path = os.path.join(build, "tools", tool, tool)
        if not os.path.exists(path):
            problems.append(f"{path}: not built")
            continue
        out = subprocess.run(["readelf", "-d", path], capture_output=True, text=True, check=True).stdout
        needed = re.findall(r"\(NEEDED\).*\[(.+?)\]", out)
        for lib in needed:
            if lib.startswith(FORBIDDEN_LIBS):
                problems.append(f"{tool} links {lib}: the codec tools must link none of oneDNN, protobuf, libonnx, MPI")
    for tool in MEASURING_TOOLS:  # static libraries: the link line CMake wrote names every module linked
        link = os.path.join(build, "tools", tool, "CMakeFiles", f"{tool}.dir", "link.txt")
        if not os.path.exists(link):
            problems.append(f"{link}: not found (is {tool} built?)")
        elif "libhpcnn_train.a" in open(link).read():
            problems.append(f"{tool} links hpcnn::train: the tools that do not train read data through hpcnn::measure")
    return problems


def self_test(lib):
    with tempfile.TemporaryDirectory() as tmp:
        copy = os.path.join(tmp, "lib")
        shutil.copytree(lib, copy)
        planted = os.path.join(copy, "dist", "planted.cpp")
        with open(planted, "w") as f:
            f.write('#include "nn/model.h"  // planted: dist knows no nn types\n')
        found = check_sources(copy)
        if not any("planted.cpp" in p and "nn/model.h" in p for p in found):
            print("self-test FAILED: the planted include was not reported", file=sys.stderr)
            return 1
        print("self-test: the planted include is reported:\n  " + next(p for p in found if "planted.cpp" in p))
        os.remove(planted)
        if check_sources(copy) != check_sources(lib):
            print("self-test FAILED: the copy differs from lib/ after removing the plant", file=sys.stderr)
            return 1
    return 0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
    ap.add_argument("--binaries")
    ap.add_argument("--self-test", action="store_true")
    a = ap.parse_args()
    lib = os.path.join(a.root, "lib")
    if a.self_test and self_test(lib):
        return 1
    problems = check_sources(lib) + (check_binaries(a.binaries) if a.binaries else [])
    for p in problems:
        print(p)
    if problems:
        print(f"layering: {len(problems)} problem(s)")
        return 1
    print(f"layering: every include of lib/ follows the module graph ({len(GRAPH)} modules)" +
          ("; the codec tools link none of oneDNN, protobuf, libonnx, MPI; prune-rate, sparsify-fcl and bn-polish "
           "do not link hpcnn::train" if a.binaries else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
