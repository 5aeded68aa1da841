#!/usr/bin/env python3
"""The include check: kcert's layering (docs/architecture.md) as a test that can fail.

Three rules, read from the source tree's #include lines (nothing is compiled):

1. Layer order. Each folder has a layer number; a file may include headers of its own layer
   or of a lower one, never of a higher one ("a lower layer never includes a higher one").
2. LibTorch-free folders stay free. A file in a folder marked torch-free must not reach a
   LibTorch header (<torch/...>, <ATen/...>, <c10/...>) through any chain of project headers,
   and must not include a header from a LibTorch folder at all: a header there may gain a
   LibTorch include tomorrow, and the torch-free layers build and test without LibTorch.
3. Python stays in its face. Nothing outside python/ includes <Python.h> or pybind11.
4. Commands stay thin. A function in harness/cli/ (parse, call, print) is at most 60 lines;
   what grows past that belongs in the runner or report room. A function here is a
   definition that starts in column 0 (the code's style: namespaces are not indented) and
   ends at the next "}" in column 0.

Usage: check-layers.py [ROOT]   (ROOT defaults to the repository this script is in)
Exit 0 when every rule holds, 1 with one line per finding ("file:line: rule: what"), 2 on bad
usage. tests/tools/test_check_layers.sh plants back-edges in a copy of the tree to show that
each rule fails.
"""
import os
import re
import sys

# folder -> (layer, torch-free). Same number: the folders may include each other.
LAYERS = {
    "harness/stats": (1, True),
    "harness/text": (1, True),
    "harness/io": (1, True),
    "harness/gates": (2, True),
    "harness/numerics": (3, False),
    "harness/kernels": (4, False),
    "harness/contract": (4, True),
    "include/kcert": (4, False),
    "harness/engine": (5, False),
    "harness/testcase": (6, True),
    "harness/store": (6, False),
    "harness/runner": (6, False),
    "eval": (6, True),
    "harness/report": (7, False),
    "harness/cli": (8, False),
    "python/src": (9, False),
}

# Headers in a LibTorch folder that are deliberately free of LibTorch and that a torch-free
# layer may include. Each entry says why; the transitive rule still checks its includes.
TORCH_FREE_HEADERS = {
    # The kernel parameter schema (names, bounds, defaults) is plain data: the loader validates
    # a case against it without LibTorch.
    "harness/kernels/schema.hpp",
    # The GPU math modes a case may pin (tf32, reduced-precision reductions) as an enum and
    # names, read by the loader and the contract.
    "harness/numerics/math_modes.hpp",
    # CaseResult, the result of one case as plain data (verdicts, numbers, the case it ran):
    # eval's tables read it. Issue 51's one result description moves it out of the engine.
    "harness/engine/case_result.hpp",
}

TORCH_HEADER = re.compile(r"^(torch|ATen|c10)/")
PYTHON_HEADER = re.compile(r"^(Python\.h|pybind11/)")
INCLUDE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
SOURCE_SUFFIXES = (".hpp", ".h", ".cpp", ".cc", ".inc", ".def")


def folder_of(path):
    """The LAYERS folder a repository-relative path lies in, or None."""
    best = None
    for folder in LAYERS:
        if path == folder or path.startswith(folder + "/"):
            if best is None or len(folder) > len(best):
                best = folder
    return best


def read_includes(root, path):
    """[(line number, '<' or '"', target)] of one file."""
    found = []
    try:
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            for number, line in enumerate(f, 1):
                m = INCLUDE.match(line)
                if m:
                    found.append((number, m.group(1), m.group(2)))
    except OSError as e:
        raise SystemExit(f"check-layers: cannot read {path}: {e.strerror}")
    return found


def project_header(root, target, including=None, kind='"'):
    """The repository path an include names, if it is a project file: for a quoted include,
    first beside the including file (as the compiler looks), then on the include path every
    target has (the repository root, include/); an angle-bracket include only on that path."""
    candidates = []
    if kind == '"' and including:
        candidates.append(os.path.join(os.path.dirname(including), target))
    candidates += [target, os.path.join("include", target)]
    for candidate in candidates:
        path = os.path.normpath(candidate)
        if not path.startswith("..") and os.path.isfile(os.path.join(root, path)):
            return path
    return None


def unlisted_folders(root):
    """Folders under harness/ with sources that LAYERS does not place: the check cannot judge
    their includes, so a new folder must be given its layer."""
    out = []
    top = os.path.join(root, "harness")
    for name in sorted(os.listdir(top)):
        folder = f"harness/{name}"
        if os.path.isdir(os.path.join(top, name)) and folder_of(folder) is None:
            out.append(folder)
    return out


def sources(root):
    for folder in LAYERS:
        top = os.path.join(root, folder)
        for dirpath, dirnames, filenames in os.walk(top):
            dirnames.sort()
            for name in sorted(filenames):
                if name.endswith(SOURCE_SUFFIXES):
                    yield os.path.relpath(os.path.join(dirpath, name), root)


def reaches_torch(root, header, cache, stack=()):
    """The chain of headers from `header` to a LibTorch include, or None. A header met again
    on the current chain (an include cycle) is not memoised as free: its answer is known only
    when the header that started the cycle is done."""
    if header in cache:
        return cache[header]
    if header in stack:
        return None
    for _, kind, target in read_includes(root, header):
        if TORCH_HEADER.match(target):
            cache[header] = [header, f"<{target}>"]
            return cache[header]
        dep = project_header(root, target, header, kind)
        if dep:
            chain = reaches_torch(root, dep, cache, stack + (header,))
            if chain:
                cache[header] = [header] + chain
                return cache[header]
    if not stack:
        cache[header] = None  # only a chain's first header is known to be free
    return None


CLI_FOLDER = "harness/cli"
CLI_FUNCTION_LINES = 60
DEFINITION_START = re.compile(r"^[A-Za-z_][^;]*\(")  # a return type or name in column 0, then "("
NOT_A_FUNCTION = re.compile(r"^(namespace|using|struct|class|enum|union|template|typedef|extern|#|//)")


def long_functions(root, path):
    """(line, name, length) of each function in `path` longer than CLI_FUNCTION_LINES."""
    with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
        lines = f.read().split("\n")
    out = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if DEFINITION_START.match(line) and not NOT_A_FUNCTION.match(line):
            j = i
            while j < len(lines) and "{" not in lines[j] and ";" not in lines[j]:
                j += 1
            if j < len(lines) and "{" in lines[j] and not lines[j].rstrip().endswith(";"):
                k = j
                if not lines[j].rstrip().endswith("}"):  # else a function on one line
                    k = j + 1
                    while k < len(lines) and not lines[k].startswith("}"):
                        k += 1
                length = k - i + 1
                if length > CLI_FUNCTION_LINES:
                    out.append((i + 1, line.split("(")[0].split()[-1], length))
                i = k
        i += 1
    return out


def check(root):
    findings = [f"{folder}: layer: a folder of sources that tools/check-layers.py gives no layer (add it to LAYERS)"
                for folder in unlisted_folders(root)]
    torch_cache = {}
    for path in sources(root):
        folder = folder_of(path)
        layer, torch_free = LAYERS[folder]
        for number, kind, target in read_includes(root, path):
            where = f"{path}:{number}"
            if PYTHON_HEADER.match(target) and not path.startswith("python/"):
                findings.append(f"{where}: python: includes <{target}> outside python/")
            if torch_free and TORCH_HEADER.match(target):
                findings.append(f"{where}: torch-free: {folder} includes <{target}>")
            dep = project_header(root, target, path, kind)
            if dep is None:
                continue
            dep_folder = folder_of(dep)
            if dep_folder is None:
                if dep.startswith("harness/"):
                    findings.append(f"{where}: layer: {dep} lies in a folder docs/architecture.md gives no layer")
                if torch_free:
                    chain = reaches_torch(root, dep, torch_cache)
                    if chain:
                        findings.append(f"{where}: torch-free: {folder} reaches LibTorch through " + " -> ".join(chain))
                continue
            dep_layer, dep_torch_free = LAYERS[dep_folder]
            if dep_layer > layer:
                findings.append(f"{where}: layer: {folder} (layer {layer}) includes {dep} "
                                f"({dep_folder}, layer {dep_layer})")
            if torch_free:
                if not dep_torch_free and dep not in TORCH_FREE_HEADERS:
                    findings.append(f"{where}: torch-free: {folder} includes {dep} from "
                                    f"{dep_folder}, a LibTorch layer")
                chain = reaches_torch(root, dep, torch_cache)
                if chain:
                    findings.append(f"{where}: torch-free: {folder} reaches LibTorch through "
                                    + " -> ".join(chain))
    for path in sources(root):
        if folder_of(path) == CLI_FOLDER:
            for line, name, length in long_functions(root, path):
                findings.append(f"{path}:{line}: thin commands: {name} is {length} lines "
                                f"(at most {CLI_FUNCTION_LINES} in {CLI_FOLDER}/)")
    return findings


def main(argv):
    if len(argv) > 2 or (len(argv) == 2 and argv[1] in ("-h", "--help")):
        print(__doc__.strip())
        return 0 if len(argv) == 2 else 2
    root = argv[1] if len(argv) == 2 else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    if not os.path.isdir(os.path.join(root, "harness")):
        print(f"check-layers: {root} has no harness/ folder; give the repository root",
              file=sys.stderr)
        return 2
    findings = check(root)
    for line in findings:
        print(line)
    files = sum(1 for _ in sources(root))
    if findings:
        print(f"check-layers: {len(findings)} finding(s) in {files} files", file=sys.stderr)
        return 1
    print(f"check-layers: {files} files, every include follows the layers, every command function is short")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
