"""The user API, cut by topic: `core` (the Tensor class: construction, realize, dtype and device, arithmetic, reduce)
and the topics mixed into it (`movement`, `elementwise`, `functional`, `compose`, `linalg`, `autograd`, `call`:
Tensor.call), `indexing` (getitem), `disk` (DISK tensors), `printing` (repr), `buffer_views` (which views of a buffer
an op writes through) and `grad_rules` (gradient rules written with Tensor methods); `jit` (TinyJit) and `writes`
(lazy in-place writes, an optimizer step's plan) sit on top of them. None of them but those two imports `core`: they
build with the class of the tensor they are given. `from attograd.tensor import Tensor` is the entry point."""
from attograd.tensor.core import Tensor  # noqa: F401
from attograd.tensor import grad_rules  # noqa: F401,E402  (registers the Tensor-written gradient rules)
from attograd.tensor import uop_methods  # noqa: F401,E402  (lends UOp the Tensor's graph-building methods)
from attograd.helpers import is_numpy_ndarray  # noqa: F401,E402  (tinygrad.tensor's name)
