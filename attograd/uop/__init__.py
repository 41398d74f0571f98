"""The IR: UOps, pattern matching and rewriting, symbolic index math and views."""
# symbolic hands UOp.simplify its rule table when it loads: loaded here, it is in place whenever any part of the IR is
from attograd.uop import symbolic  # noqa: F401
