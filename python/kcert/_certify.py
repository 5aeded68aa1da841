"""kcert.certify(): one case, built from Python values, run by kcert's engine in this process."""
import inspect
import json
import os
import re
import tempfile

from . import _C

__all__ = ["certify", "Certification", "KcertError"]

GATES = ("algebra", "bias", "variance")


class KcertError(RuntimeError):
    """kcert refused the case (bad input) or could not run it; the message is kcert's."""


def _variant_name(role, fn):
    base = re.sub(r"[^a-z0-9_]", "_", getattr(fn, "__name__", "kernel").lower()).strip("_") or "kernel"
    return f"certify_{role}_{base}"


def _kernel(role, kernel, family, extra, exact=True):
    """(variant name, params) for a variant name, a callable, or either with its params."""
    params = {}
    if isinstance(kernel, tuple):
        kernel, params = kernel
    if isinstance(kernel, str):
        return kernel, dict(params)
    if not callable(kernel):
        raise TypeError(f"{role} must be a variant name, a callable or (either, params), not {type(kernel).__name__}")
    from . import _entry, _sha256  # what @kcert.variant registers, with the exact-policy check
    name = _variant_name(role, kernel)
    source = inspect.getsourcefile(inspect.unwrap(kernel)) or "<unknown>"
    doc = (inspect.getdoc(kernel) or f"{role} given to kcert.certify").strip().splitlines()[0]
    # As @kcert.variant's: the file's digest, so an edited kernel is another kernel version.
    digest = _sha256(source)[:12] if os.path.isfile(source) else "unknown"
    version = f"python:{os.path.basename(source)}@sha256:{digest}:{kernel.__qualname__}"
    extra.append(_entry(family, name, kernel, params, doc, version, None, exact))
    return name, dict(params)


def _captured(run):
    """Runs `run()` with file descriptors 1 and 2 captured (kcert's C++ side writes to them
    directly): a library call prints nothing; what kcert said goes into a KcertError."""
    import sys
    sys.stdout.flush()
    sys.stderr.flush()
    with tempfile.TemporaryFile(mode="w+b") as out:
        saved = [os.dup(1), os.dup(2)]
        try:
            os.dup2(out.fileno(), 1)
            os.dup2(out.fileno(), 2)
            code = run()
        finally:
            for fd, copy in zip((1, 2), saved):
                os.dup2(copy, fd)
                os.close(copy)
        out.seek(0)
        return code, out.read().decode("utf-8", "replace")


def certify(*, family, reference, production, probe=None, buckets=None, replicates=None, gates=None,
            kind="positive", id=None, expected=None, profile=None, math_modes=None, production_exact=True):
    """Certifies `production` against `reference` on one probe and returns a Certification.

    reference, production: a registered variant's name (``kcert list``: C++ or
        ``@kcert.variant``), a callable ``fn(inputs, p, params) -> Tensor``, or
        ``(name_or_callable, params)``.
    probe: the case's probe (docs/testcases.md), e.g. ``{"dtype": "bf16", "seed": 7,
        "shape": {"tokens": 64, "hidden": 256}}``; dtype defaults to bf16, seed to 1.
    buckets, gates, kind, expected, profile: as in a case file; replicates: the bias gate's
        R (``--replicates``); math_modes: ``{"tf32_matmul": "on"}``.
    production_exact: False for a callable production with no fp64 mode (a Triton or CUDA
        kernel): as ``@kcert.variant(exact=False)``, its algebra gate is not applicable.

    The case runs in this process (a kernel that crashes the process takes the test with it:
    the command line's spawned workers are the isolated route).
    """
    from . import _environment, _families, _files, _variants
    extra = []
    ref_name, ref_params = _kernel("reference", reference, family, extra)
    prod_name, prod_params = _kernel("production", production, family, extra, production_exact)
    probe = {"dtype": "bf16", "seed": 1, **(probe or {})}
    case = {
        "schema": 1,
        "id": id or f"certify_{ref_name}_vs_{prod_name}",
        "kind": kind,
        "family": family,
        "mechanism": f"kcert.certify: {prod_name} against {ref_name}",
        "references": ["kcert.certify (Python)"],
        "reference": {"variant": ref_name, **({"params": ref_params} if ref_params else {})},
        "production": {"variant": prod_name, **({"params": prod_params} if prod_params else {})},
        "probe": probe,
    }
    if buckets is not None:
        case["buckets"] = buckets
    if gates is not None:
        case["gates"] = gates
    if expected is not None:
        case["expected"] = expected
    if math_modes is not None:
        case["math_modes"] = math_modes
    with tempfile.TemporaryDirectory(prefix="kcert-certify-") as tmp:
        path = os.path.join(tmp, "case.yaml")
        text = json.dumps(case)  # JSON is YAML: one line, a case file as it is
        with open(path, "w") as f:
            f.write(text + "\n")
        out = os.path.join(tmp, "result.json")
        argv = ["kcert", "--isolation", "none", "run", path, "--json", out, "--quiet", "--brief"]
        if replicates is not None:
            argv += ["--replicates", str(int(replicates))]
        if profile is not None:
            argv += ["--profile", profile]
        # The kernel files: those of --python, and those defining the callables (origin "python:FILE").
        sources = list(_files) + [entry[4][len("python:"):] for entry in extra]
        code, said = _captured(lambda: _C.main(argv, [], list(_variants) + extra, _environment(sources), list(_families)))
        if not os.path.exists(out):
            raise KcertError(f"kcert could not run the case (exit {code}):\n{said.strip()}\ncase: {text}")
        with open(out) as f:
            document = json.load(f)
    return Certification(document["results"][0], text)


class Certification:
    """What kcert said of one case: `verdict` (PASS, WARN, FAIL, INCONCLUSIVE, ERROR, SKIP),
    `verdicts` per gate, `result` (the JSON document's result, docs/results.md)."""

    def __init__(self, result, case_text):
        self.result = result
        self.case_text = case_text
        self.verdict = result["verdict"]
        self.verdicts = {g: (result.get("gates") or {}).get(g, {}).get("verdict", self.verdict) for g in GATES}

    @property
    def passed(self):
        return self.verdict == "PASS"

    def reasons(self):
        """One line per gate that did not PASS, with its worst bucket where it has one."""
        if self.verdict in ("ERROR", "SKIP"):
            return [f"{self.verdict}: {self.result.get('error') or self.result.get('skipped') or ''}".rstrip()]
        lines = []
        gates = self.result.get("gates") or {}
        for g in GATES:
            gate = gates.get(g) or {}
            if gate.get("verdict", "PASS") == "PASS":
                continue
            lines.append(f"{g} {gate['verdict']}: {gate.get('reason', '')}")
            if g == "bias":
                axis = gate.get("axis", "bucket")
                for stat in ("signed", "magnitude"):
                    top = (gate.get(stat) or {}).get("top") or []
                    if top:
                        t = top[0]
                        lines.append(f"  {stat}: worst {axis} {t['bucket']}: z {t['z']:.4g}, ULP effect "
                                     f"{t['ulp_effect']:.3g}, effect {t['effect']:.3g} ({t['verdict']})")
        return lines

    def report(self):
        r = self.result
        probe = r.get("probe", {})
        head = (f"kcert: {r['production']['variant']} against {r['reference']['variant']} "
                f"({r['family']}): {self.verdict}  [algebra {self.verdicts['algebra']}, bias "
                f"{self.verdicts['bias']}, variance {self.verdicts['variance']}]")
        repro = (f"repro: seed {probe.get('seed')}, dtype {probe.get('dtype')}, shift {probe.get('shift')}, "
                 f"{r.get('replicates')} replicates; the case:\n{self.case_text}")
        return "\n".join([head, *self.reasons(), repro])

    def assert_pass(self, *, allow_warn=False, allow_inconclusive=False):
        """Raises AssertionError with the reasons unless the verdict is PASS (or WARN /
        INCONCLUSIVE where allowed)."""
        __tracebackhide__ = True
        ok = {"PASS"} | ({"WARN"} if allow_warn else set()) | ({"INCONCLUSIVE"} if allow_inconclusive else set())
        # Gate by gate: the overall verdict ranks WARN above INCONCLUSIVE, and a WARN allowed
        # must not let an INCONCLUSIVE bias gate through.
        if self.verdict in ("ERROR", "SKIP") or any(v not in ok for v in self.verdicts.values()):
            raise AssertionError(self.report())
        return self

    @property
    def inconclusive(self):
        """Some gate could not see an effect at its floor, and none FAILed."""
        v = self.verdicts.values()
        return "INCONCLUSIVE" in v and "FAIL" not in v and self.verdict not in ("ERROR", "SKIP")

    def __repr__(self):
        return f"<kcert.Certification {self.verdict} {self.verdicts}>"
