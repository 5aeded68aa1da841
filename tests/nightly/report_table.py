#!/usr/bin/python3
"""Prints the comparable part of a nightly report's results.json: every control's
(id, verdict, gate verdicts, U) and the falsifiability counts, as one canonical JSON line.
Two runs that read the same print the same line (used by the nightly and Slurm tests)."""
import json
import sys

d = json.load(open(sys.argv[1]))
rows = sorted((r["id"], r["verdict"], r["gates"]["algebra"]["verdict"], r["gates"]["bias"]["verdict"],
               r["gates"]["variance"]["verdict"], str(r["gates"]["variance"]["U"])) for r in d["results"])
print(json.dumps({"rows": rows, "falsifiability": d["falsifiability"]}, sort_keys=True))
