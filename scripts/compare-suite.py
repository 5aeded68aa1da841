#!/usr/bin/env python3
"""Compares two `kcert suite --json` (or `kcert run --json`) result files control by control.

    scripts/compare-suite.py BEFORE.json AFTER.json [--fields-only]

Prints, per control, every difference in the verdicts (overall and per gate), U, r_T, se,
max |z| of both bias statistics, the replicate counts and the stopping rule's looks; then,
unless --fields-only, every other difference anywhere in the result documents except the
`runtime` block (timings, threads), `provenance` (revision, time) and a swept case's
per-setting `seconds`. Used to show that a
change which must not alter behaviour (a refactoring) did not: exit 0 when the files agree,
1 when they differ, 2 on unusable input.
"""
import json
import sys

IGNORED = {"runtime", "provenance"}
# Timings outside the runtime block: a swept case's per-setting wall time.
IGNORED_PATHS = {"/sweep/settings[*]/seconds"}


def load(path):
    try:
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        return {r["id"]: r for r in doc["results"]}
    except (OSError, ValueError, KeyError) as e:
        print(f"compare-suite: {path}: {e}", file=sys.stderr)
        sys.exit(2)


def fields(r):
    g = r["gates"]
    tail = g["variance"].get("tail", {})
    return {
        "verdict": r["verdict"],
        "algebra": g["algebra"]["verdict"],
        "bias": g["bias"]["verdict"],
        "variance": g["variance"]["verdict"],
        "U": g["variance"].get("U"),
        "r_T": tail.get("r_T"),
        "se": tail.get("se"),
        "max|z| signed": g["bias"]["signed"]["max_abs_z"],
        "max|z| magnitude": g["bias"]["magnitude"]["max_abs_z"],
        "replicates": r["replicates"],
        "looks": g["variance"].get("looks"),
    }


def diff(a, b, path, out):
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b)):
            if path == "" and k in IGNORED:
                continue
            if k not in a or k not in b:
                out.append(f"{path}/{k}: only in {'after' if k in b else 'before'}")
            else:
                diff(a[k], b[k], f"{path}/{k}", out)
    elif isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            diff(x, y, f"{path}[{i}]", out)
    elif a != b:
        if any(path.startswith(p.split("[*]")[0]) and path.endswith(p.split("[*]")[1]) for p in IGNORED_PATHS):
            return
        out.append(f"{path}: {json.dumps(a)[:80]} -> {json.dumps(b)[:80]}")


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    if len(args) != 2:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    before, after = load(args[0]), load(args[1])
    differing = 0
    for cid in sorted(set(before) | set(after)):
        if cid not in before or cid not in after:
            print(f"{cid}: only in {'after' if cid in after else 'before'}")
            differing += 1
            continue
        fa, fb = fields(before[cid]), fields(after[cid])
        lines = [f"  {k}: {fa[k]} -> {fb[k]}" for k in fa if fa[k] != fb[k]]
        if "--fields-only" not in sys.argv:
            other = []
            diff(before[cid], after[cid], "", other)
            lines += [f"  {o}" for o in other]
        if lines:
            differing += 1
            print(f"{cid}:")
            print("\n".join(lines[:40]))
    n = len(set(before) | set(after))
    print(f"{n} controls compared: {n - differing} identical, {differing} differ"
          f" (verdicts, U, r_T, se, max |z|, replicates, looks{'' if '--fields-only' in sys.argv else ', whole documents less runtime and provenance'})")
    return 1 if differing else 0


if __name__ == "__main__":
    sys.exit(main())
