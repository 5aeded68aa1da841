"""python -m kcert [--python FILE]... COMMAND ...: kcert's command line with Python variants."""
import os
import sys

# The kcert binary sets these before OpenMP and OpenBLAS load (re-executing itself once:
# harness/numerics/process_policy.cpp); here they must be set before torch is imported.
# Results record the values in effect, as they do for the binary.
if "torch" not in sys.modules:
    os.environ.setdefault("OMP_WAIT_POLICY", "passive")
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

from kcert import main  # noqa: E402  (after the environment above)

sys.exit(main())
