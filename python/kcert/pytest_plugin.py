"""kcert's pytest plugin: a `kcert` fixture that certifies a kernel pair beside a test's
assert_close checks, options to set the replicate budget and what WARN and INCONCLUSIVE mean,
and a summary of every certification at the end of the run.

    # conftest.py, from a build tree only: `cmake --install` installs kcert's distribution,
    # whose pytest11 entry point (named after this module, so the line stays harmless) loads it
    pytest_plugins = ["kcert.pytest_plugin"]

    # test_rmsnorm.py
    @pytest.mark.parametrize("hidden", [256, 1024])
    def test_my_rmsnorm(kcert, hidden):
        kcert.certify(family="rmsnorm", reference="llama", production=my_rmsnorm,
                      probe={"shape": {"tokens": 64, "hidden": hidden}}).assert_pass()
"""
import json

import pytest

from ._certify import Certification, certify




def pytest_addoption(parser):
    group = parser.getgroup("kcert", "kcert numerical certification (docs/python.md)")
    group.addoption("--kcert-replicates", type=int, default=None, metavar="R",
                    help="the bias gate's replicates for every certification that does not set its own "
                         "(default: the case's, 256 unless its gates say otherwise)")
    group.addoption("--kcert-profile", default=None, metavar="NAME",
                    help="a profile every certification runs under (a case made in Python has none unless given)")
    group.addoption("--kcert-warn", choices=("pass", "fail"), default="pass",
                    help="what a WARN verdict does to assert_pass(): pass (default; it is reported) or fail")
    group.addoption("--kcert-inconclusive", choices=("fail", "skip", "pass"), default="fail",
                    help="what an INCONCLUSIVE verdict (too few replicates to see an effect at the gate's floor) "
                         "does: fail (default), skip the test, or pass")
    group.addoption("--kcert-json", default=None, metavar="PATH",
                    help="write every certification's result (kcert's results JSON, with the test's node id) here")


def pytest_configure(config):
    config.addinivalue_line("markers", "kcert(**kwargs): defaults for the kcert fixture's certify() calls in this "
                                       "test (e.g. replicates=1024, profile='smoke')")
    config._kcert_results = []


class _Certifier:
    """The `kcert` fixture: certify(...) with the run's options, remembered for the summary."""

    def __init__(self, request):
        self._request = request
        self._config = request.config
        marker = request.node.get_closest_marker("kcert")
        self._defaults = dict(marker.kwargs) if marker else {}

    def certify(self, **kwargs):
        options = dict(self._defaults)
        if self._config.getoption("kcert_replicates") is not None:
            options.setdefault("replicates", self._config.getoption("kcert_replicates"))
        if self._config.getoption("kcert_profile") is not None:
            options.setdefault("profile", self._config.getoption("kcert_profile"))
        options.update(kwargs)
        result = _Checked(certify(**options), self._config)
        self._config._kcert_results.append((self._request.node.nodeid, result))
        return result


class _Checked(Certification):
    """A Certification whose assert_pass() follows --kcert-warn and --kcert-inconclusive."""

    def __init__(self, certification, config):
        super().__init__(certification.result, certification.case_text)
        self._config = config

    def assert_pass(self, *, allow_warn=None, allow_inconclusive=None):
        __tracebackhide__ = True
        if allow_warn is None:
            allow_warn = self._config.getoption("kcert_warn") == "pass"
        inconclusive = self._config.getoption("kcert_inconclusive")
        if self.inconclusive and allow_inconclusive is None and inconclusive == "skip":
            pytest.skip("kcert: INCONCLUSIVE: " + "; ".join(self.reasons()))
        if allow_inconclusive is None:
            allow_inconclusive = inconclusive == "pass"
        return super().assert_pass(allow_warn=allow_warn, allow_inconclusive=allow_inconclusive)


@pytest.fixture
def kcert(request):
    """Certifies a kernel pair with kcert's gates: ``kcert.certify(family=..., reference=...,
    production=..., probe=...)`` returns a Certification; ``.assert_pass()`` fails the test with
    the gates' reasons, the worst bucket and a one-line case file that reproduces it."""
    return _Certifier(request)


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    results = getattr(config, "_kcert_results", [])
    if not results:
        return
    terminalreporter.section("kcert certifications")
    width = max(len(node) for node, _ in results)
    terminalreporter.write_line(f"{'test':<{width}}  algebra  bias          variance      verdict")
    for node, c in results:
        v = c.verdicts
        terminalreporter.write_line(f"{node:<{width}}  {v['algebra']:<8} {v['bias']:<13} {v['variance']:<13} {c.verdict}")
    path = config.getoption("kcert_json")
    if path:
        with open(path, "w") as f:
            json.dump({"results": [dict(c.result, test=node) for node, c in results]}, f, indent=1)
        terminalreporter.write_line(f"kcert: {len(results)} result(s) written to {path}")
