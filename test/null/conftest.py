"""test/null: tests that need no device of their own (the IR, rewrites, symbolic math, views, render rules, lint, the
layer check, docstrings). None of them runs once per backend: asking for the `device` fixture here is an error (put
such a test in test/backend)."""
from __future__ import annotations
import pytest

@pytest.fixture
def device() -> None:
  pytest.fail("test/null runs no test per device: move a test that takes `device` to test/backend")
