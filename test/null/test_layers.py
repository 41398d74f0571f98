"""The package's import graph against DESIGN.md's layers: data flows down only, and no module cycle.

The imports are read from the source (ast), not by importing: every `import` and `from ... import` in a module,
at the top or inside a function, resolved to the attograd module it loads; imports under `if TYPE_CHECKING:` are left
out (they never run). Each module belongs to the first layer in LAYERS whose prefix names it; an import of a module
in a layer above is an upward import.

Known breaks of the rule would be listed in UPWARD and CYCLES as debt; issue 19 paid the last of them, so both are
empty. The test fails on any new upward import or cycle, and on a listed one that is gone, so the lists only shrink."""
from __future__ import annotations
import ast, os, sys
from functools import lru_cache
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

# top to bottom: (layer, module prefixes); a module's layer is the first whose prefix matches (so a specific
# module listed high up wins over its folder's layer below)
LAYERS: list[tuple[str, tuple[str, ...]]] = [
  ("apps", ("attograd.llm", "attograd.distributed", "attograd.nn.onnx", "attograd.nn.onnx_ops",
           "attograd.nn.onnx_types")),
  ("package", ("attograd",)),  # attograd/__init__.py: the public names, re-exported from below
  ("function", ("attograd.function",)),  # @function: finds a call's Tensors with nn.state's get_state_dict
  ("nn", ("attograd.nn",)),
  ("tensor", ("attograd.tensor",)),
  # attograd.mixin: where tinygrad 0.14 keeps compute_gradient (it re-exports gradient.py's)
  ("gradient", ("attograd.gradient", "attograd.mixin")),
  ("schedule", ("attograd.schedule",)),
  ("engine", ("attograd.engine",)),
  ("codegen", ("attograd.codegen",)),
  # a device owns its renderer (the runtime builds it from what the device supports: OpenCL's fp16/fp64 extensions,
  # the C compiler found), so the renderer sits below both: it turns UOps into text and knows no device
  ("runtime", ("attograd.runtime",)),
  ("device", ("attograd.device",)),
  ("renderer", ("attograd.renderer",)),
  ("viz", ("attograd.viz",)),  # VIZ=1: the recorder of graphs and rewrites every layer reports to, and its page
  ("ir", ("attograd.uop", "attograd.dtype", "attograd.helpers")),
]

# (importer, imported): upward imports allowed as known debt. None is left (issue 19 paid them); a debt taken on
# knowingly goes here, with the issue that pays it
UPWARD: set[tuple[str, str]] = set()

# strongly connected components of more than one module allowed as known debt: none is left either
CYCLES: set[frozenset[str]] = set()

def _modules() -> dict[str, str]:
  out = {}
  for d, _, files in os.walk(os.path.join(ROOT, "attograd")):
    for f in files:
      if not f.endswith(".py"): continue
      name = os.path.relpath(os.path.join(d, f), ROOT)[:-3].replace(os.sep, ".")
      out[name.removesuffix(".__init__")] = os.path.join(d, f)
  return out

def _type_checking_nodes(tree: ast.AST) -> set[int]:
  skip: set[int] = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
      for inner in node.body: skip.update(id(n) for n in ast.walk(inner))
  return skip

@lru_cache(None)
def import_graph() -> dict[str, frozenset[str]]:
  """module -> the attograd modules it imports (TYPE_CHECKING-only imports left out)."""
  mods = _modules()
  graph: dict[str, frozenset[str]] = {}
  for mod, path in mods.items():
    with open(path, encoding="utf-8") as f: tree = ast.parse(f.read(), path)
    skip, package = _type_checking_nodes(tree), path.endswith("__init__.py")
    deps: set[str] = set()
    for node in ast.walk(tree):
      if id(node) in skip: continue
      if isinstance(node, ast.Import): names = [a.name for a in node.names]
      elif isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:  # relative: from the module's package, up level-1 packages
          parts = mod.split(".") if package else mod.split(".")[:-1]
          base = ".".join(parts[:len(parts) - node.level + 1] + ([base] if base else []))
        # `from pkg import name` loads pkg, and pkg.name too when that is a module
        names = [base] + [f"{base}.{a.name}" for a in node.names]
      else: continue
      for n in names:
        while n and n not in mods: n = n.rpartition(".")[0]
        if n and n != mod: deps.add(n)
    graph[mod] = frozenset(deps)
  return graph

def layer_of(mod: str) -> int:
  for i, (name, prefixes) in enumerate(LAYERS):
    # the package layer is attograd/__init__.py alone, not every module under it
    if any(mod == p or (name != "package" and mod.startswith(p + ".")) for p in prefixes): return i
  raise AssertionError(f"{mod} is in no layer: add its prefix to LAYERS in {__file__}")

def upward_imports() -> set[tuple[str, str]]:
  return {(m, d) for m, deps in import_graph().items() for d in deps if layer_of(d) < layer_of(m)}

def cycles() -> set[frozenset[str]]:
  """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
  graph = import_graph()
  index: dict[str, int] = {}
  low: dict[str, int] = {}
  stack: list[str] = []
  on_stack: set[str] = set()
  out: set[frozenset[str]] = set()
  for root in sorted(graph):
    if root in index: continue
    work = [(root, iter(sorted(graph[root])))]
    index[root] = low[root] = len(index)
    stack.append(root)
    on_stack.add(root)
    while work:
      v, it = work[-1]
      w = next(it, None)
      if w is not None:
        if w not in index:
          index[w] = low[w] = len(index)
          stack.append(w)
          on_stack.add(w)
          work.append((w, iter(sorted(graph[w]))))
        elif w in on_stack: low[v] = min(low[v], index[w])
        continue
      work.pop()
      if work: low[work[-1][0]] = min(low[work[-1][0]], low[v])
      if low[v] == index[v]:
        comp = set()
        while True:
          x = stack.pop()
          on_stack.discard(x)
          comp.add(x)
          if x == v: break
        if len(comp) > 1: out.add(frozenset(comp))
  return out

def test_every_module_has_a_layer() -> None:
  for mod in import_graph(): layer_of(mod)

def test_no_new_upward_import() -> None:
  now = upward_imports()
  new = sorted(now - UPWARD)
  assert not new, "imports up the layers (data flows down only; see DESIGN.md):\n" + "\n".join(
    f"  {m} ({LAYERS[layer_of(m)][0]}) imports {d} ({LAYERS[layer_of(d)][0]})" for m, d in new)
  gone = sorted(UPWARD - now)
  assert not gone, f"these upward imports are gone: remove them from UPWARD in {__file__}: {gone}"

def test_no_new_import_cycle() -> None:
  now = cycles()
  def show(cs: set[frozenset[str]]) -> str: return "\n".join(f"  {sorted(c)}" for c in sorted(cs, key=sorted))
  assert now <= CYCLES, f"new import cycles:\n{show(now - CYCLES)}"
  assert CYCLES <= now, f"these import cycles are gone: remove them from CYCLES in {__file__}:\n{show(CYCLES - now)}"

def test_gradient_is_math_over_uops() -> None:
  # issue 19: the gradient rules read as math over UOps; they build with uop/build.py and import nothing above the IR
  above = sorted(d for d in import_graph()["attograd.gradient"] if layer_of(d) < layer_of("attograd.uop.ops"))
  assert not above, f"attograd.gradient imports above the IR: {above}"

def cross_layer_private_imports() -> list[str]:
  """Private names (`_x`) imported from a module of another layer: what one layer hands another is public there."""
  mods, out = _modules(), []
  for mod, path in sorted(mods.items()):
    with open(path, encoding="utf-8") as f: tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):
      if isinstance(node, ast.ImportFrom) and (src := node.module or "") in mods and layer_of(src) != layer_of(mod):
        out += [f"{mod}:{node.lineno} imports {a.name} from {src}" for a in node.names
                if a.name.startswith("_") and not a.name.startswith("__")]
  return out

def test_layers_share_no_private_names() -> None:
  # inside one layer (tensor/'s topic modules, the scheduler's) modules may share private helpers; across layers
  # the name is part of the lower layer's interface and says so by being public
  assert not (found := cross_layer_private_imports()), "private names imported across layers:\n" + "\n".join(found)

def private_reaches() -> list[str]:
  """Where nn/ and the apps reach past the public API by name: a private name imported from another package
  (`from attograd.tensor import _x`), or a private attribute of the Tensor class (`Tensor._x`)."""
  out = []
  for mod, path in sorted(_modules().items()):
    top = mod.split(".")[:2]
    if layer_of(mod) > layer_of("attograd.nn.optim"): continue  # nn and the layers above it
    with open(path, encoding="utf-8") as f: tree = ast.parse(f.read(), path)
    for node in ast.walk(tree):
      if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("attograd") and \
         (node.module or "").split(".")[:2] != top:
        out += [f"{mod}:{node.lineno} imports {a.name} from {node.module}" for a in node.names
                if a.name.startswith("_")]
      elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "Tensor" and \
           node.attr.startswith("_") and not node.attr.startswith("__"):
        out.append(f"{mod}:{node.lineno} uses Tensor.{node.attr}")
  return out

def test_nn_and_apps_import_no_private_names() -> None:
  # DESIGN.md: the apps, and nn, use the public Tensor/Device API (private methods on Tensor instances are not
  # caught here: the reader can't tell a Tensor from another object)
  assert not (found := private_reaches()), "private names used past the public API:\n" + "\n".join(found)

@pytest.mark.parametrize("src,want", [
  ("from attograd.tensor import Tensor", {"attograd.tensor"}),
  ("from attograd import nn", {"attograd", "attograd.nn"}),
  ("import attograd.uop.ops as o", {"attograd.uop.ops"}),
  ("def f():\n  from ..uop import ops", {"attograd.uop", "attograd.uop.ops"}),
  ("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n  from attograd.tensor import Tensor", set()),
])
def test_reads_imports(tmp_path: object, monkeypatch: pytest.MonkeyPatch, src: str, want: set[str]) -> None:
  # the reader on a one-module package: relative imports, function-level imports, TYPE_CHECKING
  me = sys.modules[__name__]
  root = os.path.join(str(tmp_path), "r")
  for d in ("attograd", "attograd/uop", "attograd/nn", "attograd/engine"):
    os.makedirs(os.path.join(root, d), exist_ok=True)
    open(os.path.join(root, d, "__init__.py"), "w").close()
  for f in ("attograd/tensor.py", "attograd/uop/ops.py"): open(os.path.join(root, f), "w").close()
  with open(os.path.join(root, "attograd", "engine", "x.py"), "w") as f: f.write(src)
  monkeypatch.setattr(me, "ROOT", root)
  import_graph.cache_clear()
  try: assert import_graph()["attograd.engine.x"] == want
  finally: import_graph.cache_clear()

if __name__ == "__main__":  # print today's upward imports and cycles, to update the lists above after a review
  for m, d in sorted(upward_imports()): print(f'  ("{m}", "{d}"),')
  for c in sorted(cycles(), key=sorted): print("  frozenset({" + ", ".join(f'"{x}"' for x in sorted(c)) + "}),")
