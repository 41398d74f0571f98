"""attograd: a small, readable and fast deep learning framework (tinygrad's design and API)."""
from attograd.helpers import Context, GlobalCounters, fetch, getenv  # noqa: F401
from attograd.dtype import dtypes  # noqa: F401
from attograd.device import Device  # noqa: F401
from attograd.uop.ops import UOp, Variable  # noqa: F401
from attograd.tensor import Tensor  # noqa: F401
from attograd import nn  # noqa: F401,E402
from attograd.tensor.jit import TinyJit  # noqa: F401,E402
from attograd.engine.profile import profile  # noqa: F401,E402
from attograd.function import function  # noqa: F401,E402
from attograd.helpers import DEFAULT_FLOAT, DEFAULT_INT  # noqa: E402
for _cv in (DEFAULT_FLOAT, DEFAULT_INT): _cv.set(_cv.value)  # DEFAULT_FLOAT=half in the environment applies at import
