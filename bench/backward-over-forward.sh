#!/usr/bin/env bash
# Backward time over forward time per replicate (issue 31), for three families: each backward
# control below is run as it is and as its forward twin (the same file without `direction` and
# `backward`), one after the other in one job, and the per-replicate seconds compared (whole
# case, and inside the kernels). A benchmark, not a test: ratios from one run.
#
#   bench/backward-over-forward.sh [build/kcert] [--profile smoke]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
KCERT="${1:-$ROOT/build/kcert}"
shift || true
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT
cases=(positive/rmsnorm/bp2_dweight_fp32_different_order.yaml
       positive/activation/bp13_silu_bwd_kernel.yaml
       positive/glu/bp13_fused_dgrad_dswiglu.yaml)
for c in "${cases[@]}"; do
  name="$(basename "$c" .yaml)"
  cp "$ROOT/testcases/$c" "$WORK/$name.bwd.yaml"
  # The forward twin: drop the direction, the backward block and the expectation (the
  # backward's expectation is not the forward's).
  /usr/bin/python3 - "$ROOT/testcases/$c" "$WORK/$name.fwd.yaml" <<'PY'
import sys, yaml
d = yaml.safe_load(open(sys.argv[1]))
for k in ("direction", "backward", "expected", "expected_on"):
    d.pop(k, None)
d["id"] += "_forward_twin"
yaml.safe_dump(d, open(sys.argv[2], "w"), sort_keys=False)
PY
  "$KCERT" run "$WORK/$name.fwd.yaml" "$@" --quiet --brief --json "$WORK/$name.fwd.json" >/dev/null || true
  "$KCERT" run "$WORK/$name.bwd.yaml" "$@" --quiet --brief --json "$WORK/$name.bwd.json" >/dev/null || true
done
/usr/bin/python3 - "$WORK" "${cases[@]}" <<'PY'
import json, os, sys
work, cases = sys.argv[1], sys.argv[2:]
print("| control | family | gradients | forward s/replicate | backward s/replicate | ratio | kernels: forward | backward | ratio |")
print("|---|---|---|---|---|---|---|---|---|")
for c in cases:
    name = os.path.basename(c)[:-5]
    f = json.load(open(f"{work}/{name}.fwd.json"))["results"][0]
    b = json.load(open(f"{work}/{name}.bwd.json"))["results"][0]
    per = lambda r, k: r["runtime"][k] / max(1, r["replicates"])
    gs = b["backward"]["gradients"]
    grads = ", ".join(g["name"] for g in gs)
    # A backward replicate certifies every gradient: the sum of each gradient's seconds per
    # replicate (gradients can grow to different R); kernels pro rata.
    secs = b["runtime"]["gradient_seconds"]
    bwd = sum(secs[g["name"]] / max(1, g["replicates"]) for g in gs)
    bwd_k = bwd * b["runtime"]["kernel_seconds"] / max(1e-12, b["runtime"]["seconds"])
    print(f"| {name} | {b['family']} | {grads} | {per(f, 'seconds'):.2e} | {bwd:.2e} | "
          f"{bwd / per(f, 'seconds'):.1f} | {per(f, 'kernel_seconds'):.2e} | {bwd_k:.2e} | "
          f"{bwd_k / per(f, 'kernel_seconds'):.1f} |")
PY
