"""test/backend: everything that runs once per device (the op table, ops, gradients, dtypes, the JIT, runtimes) and
the differential fuzzer. The `device` fixture comes from test/conftest.py; this adds the op table's size to the end
of a run that ran it."""
from __future__ import annotations
import pytest

def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:  # type: ignore[no-untyped-def]
  devices: list[str] = []
  for k in ("passed", "failed", "xfailed", "xpassed"):
    for r in terminalreporter.stats.get(k, []):
      if "test_op_table.py" in r.nodeid and "[" in r.nodeid:
        dev = r.nodeid.rsplit("-", 1)[-1].rstrip("]")
        if dev not in devices: devices.append(dev)
  if not devices: return
  from optable import size_line
  terminalreporter.write_sep("=", "op table")
  terminalreporter.write_line(size_line(devices))
