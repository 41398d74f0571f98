"""Renderers: a linear program of UOps -> source text for one language."""
from __future__ import annotations
from dataclasses import dataclass, field
from attograd.uop.ops import PatternMatcher, UOp

@dataclass
class Renderer:
  """What a language can do. `extra_matcher` holds the language's own rewrite rules, run before rendering."""
  device: str = ""
  has_threads: bool = False
  extra_matcher: PatternMatcher | None = None
  supports_float16: bool = True
  supports_vectors: bool = False
  # EXP2/LOG2 rewritten into adds, multiplies and bit ops (codegen/transcendental.py) instead of math-library calls:
  # for CPUs, where that lets them run on vector lanes; GPUs have fast native exp2/log2
  decompose_transcendentals: bool = False
  global_max: tuple[int, ...] | None = None
  # GPU-style languages: output axes become work-group (gidx) and thread (lidx) indices instead of loops
  has_local: bool = False
  local_max: int = 256          # threads in one work-group
  def render(self, name: str, uops: list[UOp]) -> str: raise NotImplementedError("a Renderer subclass renders source")

@dataclass(frozen=True)
class ProgramSpec:
  """A rendered kernel: its source, the buffers it reads and writes, its variables, and cost estimates."""
  name: str
  src: str
  device: str
  uops: tuple[UOp, ...] = ()
  globals: tuple[int, ...] = ()
  outs: tuple[int, ...] = (0,)
  vars: tuple[UOp, ...] = ()
  op_estimate: int = 0
  mem_estimate: int = 0
  applied_opts: tuple = field(default_factory=tuple)
  global_size: tuple[int, ...] | None = None   # GPU launch: work-groups per dimension (None: not a GPU kernel)
  local_size: tuple[int, ...] | None = None    # GPU launch: threads per work-group per dimension
