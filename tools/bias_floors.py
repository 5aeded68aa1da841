#!/usr/bin/python3
"""The bias gate's floors (s_min, c) re-chosen from stored results, without re-running kernels.

Reads results JSON (`kcert suite --json`, a nightly's results.json) whose bias statistics
carry `frontier`: the (standardized effect, ULP effect) points of the significant buckets
(|z| > z*) that no other significant bucket exceeds in both. Under floors (s, c) a statistic
FAILs iff some point exceeds both, WARNs iff it has significant buckets but no such point,
PASSes otherwise (method.md §3). Prints, as Markdown:
  1. per control: the largest standardized and ULP effects of each statistic;
  2. per candidate (s_min, c): negatives detected, positives FAIL / WARN (combined with the
     other gates), and which controls change verdict against the current defaults.

    tools/bias_floors.py results.json [--current S_MIN C [C_MAGNITUDE]] [--statistic signed|both]

With --statistic both (the default rule since issue 16), the magnitude statistic decides too,
with its own ULP floor C_MAGNITUDE; the candidate grid then runs over (c, c_magnitude) at
s_min 0.2.
"""
import argparse
import json
import math


def num(x):
    if isinstance(x, str):
        return math.inf if x == "inf" else (-math.inf if x == "-inf" else math.nan)
    return float(x)


def verdict_under(stat, s_min, c):
    frontier = [(num(e), num(u)) for e, u in stat.get("frontier", [])]
    # Buckets attributed to the reference (issue 30) are not on the frontier and WARN under
    # any floors.
    if not frontier and stat.get("attributed_buckets", 0) > 0:
        return "WARN"
    if not frontier:
        return "PASS"
    return "FAIL" if any(e > s_min and u > c for e, u in frontier) else "WARN"


# INCONCLUSIVE (issue 32): the gate could not see an effect at its floor; above PASS, below
# WARN, and not a detection.
ORDER = {"PASS": 0, "INCONCLUSIVE": 1, "WARN": 2, "FAIL": 3}


def worst(*vs):
    return max(vs, key=lambda v: ORDER[v])


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("results", nargs="+")
    ap.add_argument("--current", nargs="+", type=float, default=[0.2, 0.3, 0.2],
                    help="S_MIN C [C_MAGNITUDE]: the floors changes are listed against (default 0.2 0.3 0.2)")
    ap.add_argument("--statistic", choices=["signed", "both"], default="both",
                    help="both: signed and magnitude decide (the default rule); signed: the notes' rule")
    args = ap.parse_args()
    rows = []
    for path in args.results:
        for r in json.load(open(path))["results"]:
            if "error" in r:
                continue
            rows.append(r)
    rows.sort(key=lambda r: (r["kind"], r["family"], r["id"]))

    def bias(r, s, c, cm):
        b = r["gates"]["bias"]
        v = verdict_under(b["signed"], s, c)
        if args.statistic == "both":
            v = worst(v, verdict_under(b["magnitude"], s, cm))
        # A gate blind at its floor stays so under other floors (approximately: blindness
        # grows as c shrinks, which this re-judging does not recompute).
        if v == "PASS" and b.get("verdict") == "INCONCLUSIVE":
            v = "INCONCLUSIVE"
        return v

    def overall(r, s, c, cm):
        g = r["gates"]
        return worst(g["algebra"]["verdict"], g["variance"]["verdict"], bias(r, s, c, cm))

    print("## Measured bias effects per control\n")
    print("Largest standardized effect |mean|/sd and ULP effect |mean|/ULP among the significant buckets "
          "(|z| > z*), each statistic; `-` no significant bucket. Other gates as measured.\n")
    print("| control | kind | family | signed max \\|z\\| | signed effect | signed ULP | magnitude effect | magnitude ULP "
          "| algebra | variance |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        b = r["gates"]["bias"]
        cells = []
        for st in ("signed", "magnitude"):
            fr = [(num(e), num(u)) for e, u in b[st].get("frontier", [])]
            cells += [f"{max(e for e, _ in fr):.3g}", f"{max(u for _, u in fr):.3g}"] if fr else ["-", "-"]
        z = num(b["signed"]["max_abs_z"])
        print(f"| `{r['id']}` | {r['kind']} | {r['family']} | {z:.3g} | {cells[0]} | {cells[1]} | {cells[2]} | {cells[3]} "
              f"| {r['gates']['algebra']['verdict']} | {r['gates']['variance']['verdict']} |")

    if len(args.current) not in (2, 3):
        ap.error("--current takes S_MIN C [C_MAGNITUDE]")
    s0, c0 = args.current[:2]
    cm0 = args.current[2] if len(args.current) == 3 else c0
    neg = [r for r in rows if r["kind"] == "negative"]
    pos = [r for r in rows if r["kind"] == "positive"]
    if args.statistic == "both":
        grid = [(0.2, c, cm) for c in (0.1, 0.2, 0.3) for cm in (0.1, 0.15, 0.2, 0.25, 0.3)]
        print("\n## Candidate floors (signed and magnitude deciding, s_min 0.2)\n")
        print("| c signed (ULP) | c magnitude (ULP) | negatives detected | positives FAIL | positives WARN | changes against "
              f"c {c0:g}, c_magnitude {cm0:g} (bias verdict) |")
        print("|---|---|---|---|---|---|")
    else:
        grid = [(s, c, c) for s in (0.2, 0.3, 0.5, 1.0, 2.0) for c in (0.05, 0.1, 0.15, 0.2, 0.3)]
        print("\n## Candidate floors (signed statistic deciding)\n")
        print("| s_min | c (ULP) | negatives detected | positives FAIL | positives WARN | changes against "
              f"s_min {s0:g}, c {c0:g} (bias verdict) |")
        print("|---|---|---|---|---|---|")
    for s, c, cm in grid:
        det = sum(overall(r, s, c, cm) in ("WARN", "FAIL") for r in neg)
        pf = sum(overall(r, s, c, cm) == "FAIL" for r in pos)
        pw = sum(overall(r, s, c, cm) == "WARN" for r in pos)
        changes = [f"{r['id']} {bias(r, s0, c0, cm0)}→{bias(r, s, c, cm)}" for r in rows
                   if bias(r, s, c, cm) != bias(r, s0, c0, cm0)]
        first = f"| {c:g} | {cm:g}" if args.statistic == "both" else f"| {s:g} | {c:g}"
        print(f"{first} | {det}/{len(neg)} | {pf}/{len(pos)} | {pw}/{len(pos)} | {'; '.join(changes) or '-'} |")

if __name__ == "__main__":
    main()
