"""Where tinygrad 0.14 keeps its mixins (the methods its Tensor and UOp share): the names code written for it imports
from here. attograd's own modules are elsewhere; these only point to them."""
