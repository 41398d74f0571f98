"""tinygrad 0.14's home of `compute_gradient`: attograd's is gradient.py's (one rule per op, over UOps)."""
from attograd.gradient import compute_gradient

__all__ = ["compute_gradient"]
