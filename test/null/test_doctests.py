"""The examples in the package's docstrings run and print what they say (doctest), module by module."""
from __future__ import annotations
import doctest, importlib, pkgutil
import pytest
import attograd
from attograd import Context, Device, Tensor, TinyJit, Variable, dtypes, nn

# names the examples use without importing them, as a reader of the API page would
GLOBS = dict(Tensor=Tensor, dtypes=dtypes, nn=nn, TinyJit=TinyJit, Variable=Variable, Device=Device, Context=Context)

def _modules() -> list[str]:
  # __main__ modules run programs when imported; optional-dependency modules are imported only if they import
  return sorted(m.name for m in pkgutil.walk_packages(attograd.__path__, "attograd.")
                if not m.name.endswith("__main__"))

@pytest.mark.parametrize("name", _modules())
def test_docstring_examples(name: str) -> None:
  try: mod = importlib.import_module(name)
  except ImportError as e: pytest.skip(f"{name} needs an optional package: {e}")
  finder = doctest.DocTestFinder()
  runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
  for test in finder.find(mod, name, globs={**vars(mod), **GLOBS}):
    runner.run(test)
  res = runner.summarize(verbose=False)
  assert res.failed == 0, f"{res.failed} of {res.attempted} docstring examples in {name} failed (see the output above)"

def test_examples_exist() -> None:
  n = 0
  for name in _modules():
    try: mod = importlib.import_module(name)
    except ImportError: continue
    n += sum(len(t.examples) for t in doctest.DocTestFinder().find(mod, name))
  assert n >= 100  # the public API is documented with examples; this catches the finder silently finding none
