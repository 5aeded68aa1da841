"""kcert from Python: certify kernels written in Python with kcert's gates.

    # my_kernels.py
    import kcert

    @kcert.variant("rmsnorm", "my_fused", params={"eps": 1e-6})
    def my_fused(inputs, p, params):
        u = p.up(inputs["x"])
        r = torch.rsqrt(u.pow(2).mean(-1, keepdim=True) + params["eps"])
        return p.round_w(u * r * p.up(inputs["w"]))

    $ python -m kcert --python my_kernels.py run my_case.yaml

A variant is a callable ``fn(inputs, p, params) -> Tensor``: ``inputs`` maps the family's
input names to tensors (a leading batch dimension, one slice per replicate), ``p`` is the
precision policy (``p.up``, ``p.round_w``, ``p.working_dtype``, ``p.compute_dtype``,
``p.is_exact``) and ``params`` the case's parameters for it. It joins a family kcert already
has (``kcert list``) and is named in a case like any variant. Everything else is kcert's
command line, unchanged: ``run``, ``suite``, ``nightly``, the database, the reports.
Cases whose kernels come from Python run in a spawned ``python -m kcert`` worker by default
(``--isolation plugins``): a crash, ``sys.exit()`` or hang there is that case's ERROR.
docs/python.md has the rest.
"""
import contextlib
import functools
import hashlib
import importlib.util
import inspect
import os
import stat
import sys

import torch  # first: kcert._C links the same LibTorch, and torch's tensor caster needs it loaded
from torch.utils._python_dispatch import TorchDispatchMode

from . import _C

# The kcert binary re-executes itself once to apply its thread policy before OpenMP and
# OpenBLAS load (harness/numerics/process_policy.cpp); here the process is Python, torch is
# loaded, and re-executing /proc/self/exe would replace the interpreter: never.
os.environ["KCERT_NO_REEXEC"] = "1"

__all__ = ["variant", "family", "exact_casts", "certify", "Certification", "KcertError", "main", "Precision"]

Precision = _C.Precision

# What was imported before any kernel file: the modules imported after it are the kernels'
# (transformers, liger_kernel, ...), and their versions go into the environment.
_MODULES_AT_IMPORT = set(sys.modules)

_variants = []  # (family, name, version, description, origin, params, fn, unavailable, exact), in registration order
_files = []  # the --python files imported, in order, for the spawned workers
_families = []  # (name, description, origin, probe params, fixed, replicate, buckets, gradients), in order


def _sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 16), b""):
            h.update(block)
    return h.hexdigest()


_LOW_PRECISION = (torch.float32, torch.float16, torch.bfloat16)


def _caller_frame():
    """The innermost frame of the user's code (not torch's, not kcert's): where a cast is."""
    import traceback
    here = os.path.dirname(os.path.abspath(__file__))
    torch_dir = os.path.dirname(os.path.abspath(torch.__file__))
    for frame in reversed(traceback.extract_stack()):
        f = os.path.abspath(frame.filename)
        if not f.startswith(here) and not f.startswith(torch_dir) and not f.startswith("<"):
            return f"{frame.filename}:{frame.lineno} ({frame.name}: {(frame.line or '').strip()})"
    return "an unknown line"


def _floating_dtypes(out):
    if isinstance(out, torch.Tensor):
        return [out.dtype] if out.is_floating_point() else []
    if isinstance(out, (list, tuple)):
        return [d for o in out for d in _floating_dtypes(o)]
    return []


class _ExactOnly(TorchDispatchMode):
    """Active while a variant runs under the exact policy: an op that returns a floating tensor
    below fp64 means the oracle is not exact (HF eager code's `.float()` on fp64 inputs
    computes in fp32 and casts back, so the output's dtype alone cannot show it)."""

    def __init__(self, what):
        super().__init__()
        self.what = what

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        # Ops on floating data only: a factory (a module's torch.ones(n) parameter, made in the
        # default dtype and then moved to fp64) computes nothing from the inputs.
        computes = any(d is not None for d in _floating_dtypes(list(args) + list((kwargs or {}).values())))
        low = [d for d in _floating_dtypes(out) if d in _LOW_PRECISION] if computes else []
        if low:
            raise RuntimeError(
                f"variant {self.what} is not exact under the exact policy (the fp64 oracle and the algebra gate): "
                f"{func} made a {low[0]} tensor at {_caller_frame()}. A cast such as .float() or "
                f".to(torch.float32) computes in that dtype even on fp64 inputs. Write the cast points with "
                f"p.up() / p.round_w(), or wrap the kernel with @kcert.exact_casts, which runs it in fp64 under "
                f"the exact policy and unchanged otherwise (docs/python.md)")
        return out


class _PromoteCasts(TorchDispatchMode):
    """Every dtype an op asks for below fp64 becomes fp64: an eager kernel's own cast points,
    run on fp64 inputs, then compute its real function in fp64."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = dict(kwargs or {})
        if kwargs.get("dtype") in _LOW_PRECISION:
            kwargs["dtype"] = torch.float64
        return func(*args, **kwargs)


def _when_exact(fn, context):
    """fn as kcert calls it: unchanged under the working policy, inside `context()` under the
    exact one (the fp64 oracle and the algebra gate)."""
    @functools.wraps(fn)
    def run(inputs, p, params):
        if not p.is_exact:
            return fn(inputs, p, params)
        with context():
            return fn(inputs, p, params)

    return run


@contextlib.contextmanager
def _promoted_casts():
    # Tensors made without a dtype (a module's parameters, torch.ones(n)) take the default.
    default = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        with _PromoteCasts():
            yield
    finally:
        torch.set_default_dtype(default)


def exact_casts(fn):
    """Wraps an eager kernel that writes its own casts (`.float()`, `.to(torch.float32)`,
    `x.to(input_dtype)`: Hugging Face's modules) so that under the exact policy every cast to a
    floating dtype below fp64 is promoted to fp64, and its fp64 run is its real function;
    under the working policy it runs unchanged, casts and all.

        @kcert.variant("rmsnorm", "hf_llama")
        @kcert.exact_casts
        def hf_llama(inputs, p, params):
            return hf_module(inputs["x"])   # LlamaRMSNorm's forward, as transformers has it
    """
    return _when_exact(fn, _promoted_casts)


def _entry(family, name, fn, params=None, description=None, version=None, unavailable=None, exact=True):
    """A Python variant as kcert._C.main takes it: (family, name, version, description,
    origin, params, fn, unavailable, exact), fn refused under the exact policy where it is not
    exact. exact=False (an opaque kernel) is never called under the exact policy.
    version: default ``python:FILE@sha256:<12 hex>`` of the file that defines fn;
    description: default the first line of its docstring."""
    source = inspect.getsourcefile(inspect.unwrap(fn)) or "<unknown>"
    if version is None:
        digest = _sha256(source)[:12] if os.path.isfile(source) else "unknown"
        version = f"python:{os.path.basename(source)}@sha256:{digest}"
    if description is None:
        description = (inspect.getdoc(fn) or f"Python variant {getattr(fn, '__qualname__', name)}").strip().splitlines()[0]
    what = f"{family}/{name}"
    if not isinstance(exact, bool):
        raise TypeError(f"kcert.variant({family!r}, {name!r}): exact must be True or False, not {exact!r}")
    return (family, name, version, description, f"python:{source}", dict(params or {}),
            _when_exact(fn, lambda: _ExactOnly(what)) if exact else _never_exact(fn, what), unavailable or "", exact)


def _never_exact(fn, what):
    """An opaque variant as kcert calls it: only ever under the working policy."""
    @functools.wraps(fn)
    def run(inputs, p, params):
        if p.is_exact:
            raise RuntimeError(f"{what} is opaque (exact=False) and was called under the exact policy: a kcert bug")
        return fn(inputs, p, params)

    return run


def variant(family, name, *, params=None, description=None, version=None, unavailable=None, exact=True):
    """Registers ``fn(inputs, p, params) -> Tensor`` as variant ``name`` of ``family``.

    params: the variant's parameters and their defaults ({"eps": 1e-6}); a default's type
    (bool, int, float, str, list of numbers) is the parameter's type, None makes it required.
    version: recorded with every result; default ``python:FILE@sha256:<12 hex>`` of the
    file that defines ``fn``, so a changed kernel file is a changed kernel version.
    unavailable: why this machine cannot run it (``"transformers is not installed"``), or
    None. Its cases still load and validate, and SKIP with this reason instead of failing.
    exact: False for an opaque kernel (Triton, CUDA, a library call) with no fp64 mode. It is
    then run only at the working precision: its algebra gate reads "not applicable", bias and
    variance compare it with the reference and the reference's fp64 oracle. It cannot be a
    reference.
    """
    def register(fn):
        if not callable(fn):
            raise TypeError(f"kcert.variant({family!r}, {name!r}) decorates a callable, not {type(fn).__name__}")
        _variants.append(_entry(family, name, fn, params, description, version, unavailable, exact))
        return fn

    return register


def family(name, *, replicate, buckets, fixed=None, probe=None, description=None, gradients=None):
    """Registers an operator family defined in Python: its inputs, probe parameters and bucket
    axes; its variants are then ``@kcert.variant(name, ...)`` functions (one of them the
    reference) and its cases name it as ``family: NAME``. With ``gradients``, its backward too.

    replicate: ``fn(probe, fixed, seed) -> dict[str, Tensor]``, one replicate's inputs without
    the batch dimension, drawn from ``seed`` alone (``torch.Generator().manual_seed(seed)``:
    the same seed must give the same tensors) and already rounded to the probe's dtype
    (``probe.dtype``, the working precision W). ``probe`` has ``dtype``, ``seed``, ``shift``,
    ``scale``, ``outlier_count``, ``outlier_magnitude``, ``row_offset_sd`` and ``params`` (the
    case's ``probe.shape``-style parameters declared below, by dotted name).
    fixed: ``fn(probe, seed) -> dict[str, Tensor]``, inputs drawn once per case (weights), or
    None.
    buckets: ``{"axis": fn(probe, shape) -> LongTensor}``, the bucket of every output element
    (``shape``: one replicate's output shape) for each bucket axis; the first is the default.
    probe: the family's probe parameters and their defaults (``{"shape.tokens": 64}``; as
    variant params, a default's type is the parameter's type).
    gradients: what its backward certifies (``direction: backward``), by gradient name:
    ``{"dx": {"input": "x", "buckets": {"channel": fn(probe, shape)}}, "dw": {"input": "w",
    "buckets": {"element": fn}, "reduction": "shape.tokens"}}``. ``input`` names the input it
    differentiates; ``buckets`` bucket one replicate's gradient as above; ``reduction`` (for a
    weight's gradient) names the integer probe parameter that counts what it sums over (the N
    of the method's claim), ``reduces`` says it in words (default: the parameter's last part);
    ``description`` is optional. The variants' backward is autograd's through their forward
    (or a ``torch.autograd.Function``'s own).
    """
    what = f"kcert.family({name!r})"
    if not callable(replicate):
        raise TypeError(f"{what}: replicate must be callable, not {type(replicate).__name__}")
    if fixed is not None and not callable(fixed):
        raise TypeError(f"{what}: fixed must be callable or None, not {type(fixed).__name__}")
    if not isinstance(buckets, dict) or not buckets or not all(
            isinstance(k, str) and k and callable(v) for k, v in buckets.items()):
        raise TypeError(f"{what}: buckets must map at least one axis name to a callable fn(probe, shape)")
    if any(f[0] == name for f in _families):
        raise ValueError(f"{what}: a family of that name is already defined")
    probe = dict(probe or {})
    grads = []
    for gname, g in (gradients or {}).items():
        where = f"{what}: gradients[{gname!r}]"
        if not isinstance(g, dict) or not isinstance(g.get("input"), str):
            raise TypeError(f"{where} must be a dict with 'input' (the input it differentiates) and 'buckets'")
        unknown = set(g) - {"input", "buckets", "reduction", "reduces", "description"}
        if unknown:
            raise TypeError(f"{where}: unknown key(s) {sorted(unknown)}")
        gb = g.get("buckets")
        if not isinstance(gb, dict) or not gb or not all(isinstance(k, str) and k and callable(v) for k, v in gb.items()):
            raise TypeError(f"{where}: buckets must map at least one axis name to a callable fn(probe, shape)")
        reduction = g.get("reduction") or ""
        default = probe.get(reduction)
        if reduction and (not isinstance(default, int) or isinstance(default, bool)):
            raise ValueError(f"{where}: reduction {reduction!r} must name an integer probe parameter of the family")
        reduces = g.get("reduces") or (reduction.split(".")[-1] if reduction else "")
        grads.append((gname, g["input"], reduces, g.get("description") or f"gradient of {g['input']}", dict(gb),
                      reduction))
    source = inspect.getsourcefile(inspect.unwrap(replicate)) or "<unknown>"
    if description is None:
        description = f"Python family {name} ({os.path.basename(source)})"
    _families.append((name, description, f"python:{source}", probe, fixed, replicate, dict(buckets), grads))


def _check_trusted(path):
    """A Python file is code: the same rule as a plugin (docs/plugins.md). It and its folder
    must belong to you or root and not be writable by group or others."""
    for p, what in ((path, "file"), (os.path.dirname(path) or ".", "folder")):
        st = os.stat(p)
        if st.st_uid not in (0, os.geteuid()):
            raise PermissionError(f"--python {path}: its {what} {p} belongs to uid {st.st_uid}, neither you nor root")
        writable = st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)
        if writable and not (what == "folder" and st.st_mode & stat.S_ISVTX):
            raise PermissionError(f"--python {path}: its {what} {p} is writable by its group or others")


def _import_file(path):
    path = os.path.realpath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"--python {path}: no such file")
    _check_trusted(path)
    name = "kcert_user_" + hashlib.sha256(path.encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    _files.append(path)


def _split_python_files(argv):
    files, rest = [], []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a == "--python":
            if i + 1 >= len(argv):
                raise ValueError("--python needs a file")
            files.append(argv[i + 1])
            i += 2
            continue
        if a.startswith("--python="):
            files.append(a[len("--python="):])
        else:
            rest.append(a)
        i += 1
    return files, rest


def _environment(files):
    """The front end's part of the environment identity (harness/store/environment.hpp), as
    JSON text, when Python kernels take part; "" otherwise (a run of C++ variants keeps the
    kcert binary's fingerprint)."""
    import json
    import platform
    if not _variants and not _families and not files:
        return ""
    stdlib = getattr(sys, "stdlib_module_names", frozenset())
    modules = {}
    for name in sorted(set(sys.modules) - _MODULES_AT_IMPORT):
        if "." in name or name.startswith(("_", "kcert")) or name in stdlib:
            continue
        version = getattr(sys.modules[name], "__version__", None)
        if isinstance(version, str):
            modules[name] = version
    hashes = {}
    for f in files:
        if os.path.isfile(f):
            key = os.path.basename(f)
            while key in hashes:
                key += "'"
            hashes[key] = _sha256(f)
    return json.dumps({"python": platform.python_version(), "torch": torch.__version__.split("+")[0],
                       "modules": modules, "files": hashes})


def _describe(out_fd):
    """What the kcert binary needs to load cases that name these files (`python:` in a case,
    `kcert --python FILE`): each variant's schema, as one JSON document on `out_fd` (the
    process's stdout, kept apart while the files were imported: what they print goes to
    stderr). The binary registers stand-ins from it and runs the cases in `python -m kcert`
    workers (harness/runner/python_route.cpp)."""
    import json
    variants = []
    for family, name, version, description, origin, params, _fn, unavailable, exact in _variants:
        variants.append({"family": family, "name": name, "version": version, "description": description,
                         "origin": origin, "params": params, "unavailable": unavailable, "exact": exact})
    families = [{"name": name, "description": description, "origin": origin, "probe_params": probe,
                 "bucket_axes": list(buckets),
                 "gradients": [{"name": g[0], "input": g[1], "bucket_axes": list(g[4]), "reduces": g[2], "description": g[3],
                                "reduction": g[5]} for g in grads]}
                for name, description, origin, probe, _fixed, _replicate, buckets, grads in _families]
    with os.fdopen(out_fd, "w") as out:
        json.dump({"variants": variants, "families": families, "files": list(_files)}, out)
        out.write("\n")
    return 0


def main(argv=None):
    """kcert's command line with ``--python FILE`` (repeatable): imports each file, whose
    ``@kcert.variant`` functions join the registry, then runs the rest as ``kcert`` would.
    Returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    describe_fd = None
    try:
        files, rest = _split_python_files(argv)
        if rest == ["describe-python"]:
            # The description's channel is stdout; a kernel file that prints at import (a
            # banner, a warning) must not break it: fd 1 is stderr until the description.
            sys.stdout.flush()
            describe_fd = os.dup(1)
            os.dup2(2, 1)
        for f in files:
            _import_file(f)
    except (OSError, ValueError) as e:  # PermissionError and FileNotFoundError are OSErrors
        print(f"kcert: error: {e}", file=sys.stderr)
        return 2
    if describe_fd is not None:
        sys.stdout.flush()
        return _describe(describe_fd)
    worker = [sys.executable, "-m", "kcert"]
    for f in _files:
        worker += ["--python", f]
    return _C.main(["kcert"] + rest, worker, list(_variants), _environment(_files), list(_families))


from ._certify import Certification, KcertError, certify  # noqa: E402  (uses the names above)
