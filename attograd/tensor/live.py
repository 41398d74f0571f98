"""Every live Tensor, weakly. UOps can't lead back to the Tensors that hold them, and two passes need those: an
in-place write (assign, setitem, an optimizer step) first realizes the lazy tensors that read the buffer it writes,
and backward() fills `.grad` of the tensors in its graph."""
from __future__ import annotations
import weakref
from typing import TYPE_CHECKING, Iterator
if TYPE_CHECKING: from attograd.tensor.core import Tensor

# Tensor.__init__ and Tensor._new append to _made (inline: it is every op's path) and call prune() when it is longer
# than _prune_at[0], which drops the dead references: so the list is pruned whenever it has doubled since the last pass
_made: list[weakref.ref] = []
_weakref = weakref.ref
_prune_at = [4096]

def prune() -> None:
  _made[:] = [r for r in _made if r() is not None]
  _prune_at[0] = max(4096, 2 * len(_made))

def live_tensors() -> Iterator[Tensor]:
  """The Tensors alive now, oldest first (a snapshot: tensors made while iterating are not visited)."""
  for r in list(_made):
    if (t := r()) is not None: yield t
