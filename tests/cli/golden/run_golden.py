#!/usr/bin/env python3
"""Runs one golden CLI test file, in the manner of LLVM's lit and FileCheck.

A test file holds the command and the lines its output must contain:

    # RUN: %kcert tail-fit %S/inputs/khat.txt
    # EXIT: 0
    # CHECK: mode            fitted
    # CHECK-NEXT: u ...
    # CHECK-NOT: warning

%kcert is the kcert binary, %S the folder of the test file, %testcases the repository's
controls. The command runs under bash; stdout and stderr are checked together. CHECK lines
must match (as substrings) in order, CHECK-NEXT on the line right after the previous match,
CHECK-NOT nowhere after the previous match. EXIT defaults to 0. A failure prints the
command, what was expected and the whole output, so a change in output is a visible diff.

    run_golden.py KCERT_BINARY REPO_ROOT TEST_FILE
"""
import os
import subprocess
import sys


def main():
    kcert, root, path = sys.argv[1:4]
    here = os.path.dirname(os.path.abspath(path))
    run, checks, exit_code = None, [], 0
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            line = line.rstrip("\n")
            for tag in ("RUN:", "EXIT:", "CHECK-NEXT:", "CHECK-NOT:", "CHECK:"):
                prefix = "# " + tag
                if line.startswith(prefix):
                    value = line[len(prefix):].strip()
                    if tag == "RUN:":
                        run = value
                    elif tag == "EXIT:":
                        exit_code = int(value)
                    else:
                        checks.append((tag[:-1], value, number))
                    break
    if run is None:
        print(f"{path}: no '# RUN:' line")
        return 2
    command = run.replace("%kcert", kcert).replace("%S", here).replace("%testcases", os.path.join(root, "testcases"))
    proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, COLUMNS="120"))
    output = (proc.stdout + proc.stderr).splitlines()
    failures = []
    if proc.returncode != exit_code:
        failures.append(f"exit status {proc.returncode}, expected {exit_code}")
    pos = 0  # first line the next CHECK may match
    last = -1
    for kind, text, number in checks:
        if kind == "CHECK":
            found = next((i for i in range(pos, len(output)) if text in output[i]), None)
            if found is None:
                failures.append(f"line {number}: CHECK not found after output line {pos}: {text!r}")
                continue
            last, pos = found, found + 1
        elif kind == "CHECK-NEXT":
            if last + 1 < len(output) and text in output[last + 1]:
                last, pos = last + 1, last + 2
            else:
                got = output[last + 1] if last + 1 < len(output) else "<end of output>"
                failures.append(f"line {number}: CHECK-NEXT expected {text!r} on the line after {last}, got {got!r}")
        elif kind == "CHECK-NOT":
            hit = next((i for i in range(pos, len(output)) if text in output[i]), None)
            if hit is not None:
                failures.append(f"line {number}: CHECK-NOT found {text!r} on output line {hit}: {output[hit]!r}")
    if failures:
        print(f"FAIL {path}\n$ {command}")
        for f in failures:
            print("  " + f)
        print("--- output ---")
        print("\n".join(output))
        return 1
    print(f"PASS {os.path.basename(path)} ({len(checks)} checks)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
