"""The user API, cut by topic: `core` (the Tensor class: construction, realize, dtype and device, arithmetic), and
the topics mixed into it: `movement`, `elementwise`, `functional` (nn functions), `compose`, `linalg`, `autograd`,
`indexing`; `disk` (DISK tensors) and `printing` (repr). `from attograd.tensor import Tensor` is the entry point."""
from attograd.tensor.core import Tensor, _buffer_from_bytes  # noqa: F401
from attograd.tensor import grad_rules  # noqa: F401,E402  (registers the Tensor-written gradient rules)
