"""The search over the code generator's optimization actions: `search.py` (BEAM=n), where tinygrad keeps its own, so
code that reaches for `codegen.opt.search.beam_search` finds it. The loop space and its actions are `kernel.py`, the
default choice of actions `heuristic.py`."""
