"""Tests for the rewrite engine's tinygrad-shaped API in attograd/uop/ops.py: UOp tags, UPat choices (list sources,
UPat.any, tag), graph_rewrite's walks (post-order, bottom_up/bpm, walk), BottomUpGate, the runaway-loop error,
substitute(extra_pm=) and rewrite tracking (rewrite_group, TrackedPatternMatcher)."""
import hashlib, inspect, math, pickle, types
import pytest
from attograd.dtype import dtypes
from attograd.helpers import Context
import attograd.uop.ops as ops
from attograd.uop.ops import (BottomUpGate, GroupOp, Ops, PatternMatcher, TrackedPatternMatcher, UOp, UPat, Variable,
                              _substitute, deconstruct_function, graph_rewrite, rewrite_group)

I32 = dtypes.int32
def c(x: int) -> UOp: return UOp.const(I32, x)

# ***** tags *****

def test_tag_is_part_of_the_node() -> None:
  a = Variable("a", 0, 9) + 1
  t = a.rtag()
  assert t is not a and t.tag is True and a.tag is None
  assert t is a.rtag(True) and t.rtag(None) is a  # hash-consed with the tag; taking it off gives the node back
  assert a.replace(tag=2) is not t
  assert pickle.loads(pickle.dumps(t)) is t
  with pytest.raises(AttributeError): t.tag = 3  # type: ignore[misc]

def test_rewrite_keeps_a_tag_when_sources_change() -> None:
  a, b = Variable("a", 0, 9), Variable("b", 0, 9)
  out = graph_rewrite((a + 4).rtag(1), _substitute, {a: b})
  assert out is (b + 4).rtag(1)

# ***** UPat choices *****

def test_list_src_tries_every_order() -> None:
  pm = PatternMatcher([(UPat(Ops.ADD, src=[UPat(Ops.CONST, name="k"), UPat(Ops.DEFINE_VAR, name="v")]),
                        lambda k, v: v * k.arg)])
  a = Variable("a", 0, 9)
  assert pm.rewrite(UOp(Ops.ADD, I32, (a, c(3)))) is a * 3
  assert pm.rewrite(UOp(Ops.ADD, I32, (c(3), a))) is a * 3
  assert pm.rewrite(a + a) is None

def test_choices_backtrack_across_levels() -> None:
  # the inner order that binds b must agree with the outer b: only trying every way finds it
  x, y = c(1), c(2)
  pm = PatternMatcher([(UPat(Ops.ADD, src=[UPat(Ops.ADD, src=[UPat(name="a"), UPat(name="b")]), UPat(name="b")]),
                        lambda a, b: a)])
  assert pm.rewrite(UOp(Ops.ADD, I32, (UOp(Ops.ADD, I32, (x, y)), x))) is y
  assert pm.rewrite(UOp(Ops.ADD, I32, (UOp(Ops.ADD, I32, (y, x)), x))) is y
  assert pm.rewrite(UOp(Ops.ADD, I32, (UOp(Ops.ADD, I32, (y, y)), x))) is None

def test_upat_any_tries_each_alternative_until_the_rule_returns() -> None:
  seen: list[str] = []
  def rule(x: UOp | None = None, y: UOp | None = None) -> UOp | None:
    seen.append("x" if x is not None else "y")
    return None if y is None else y.rtag()
  pm = PatternMatcher([(UPat(Ops.NEG, src=(UPat.any(UPat(Ops.CONST, name="x"), UPat(name="y")),)), rule)])
  k = c(5)
  assert pm.rewrite(UOp(Ops.NEG, I32, (k,))) is k.rtag()
  assert seen == ["x", "y"]

def test_upat_tag_and_const_in_both_orders() -> None:
  pm = PatternMatcher([(UPat(Ops.CONST, name="x", tag=1), lambda x: x.rtag(2))])
  assert pm.rewrite(c(3)) is None and pm.rewrite(c(3).rtag(1)) is c(3).rtag(2)
  assert UPat.const(I32, 4).arg == 4 and UPat.const(4, I32).arg == 4  # attograd's order and tinygrad's
  assert UPat.const(4, I32).dtype == frozenset([I32])
  with pytest.raises(ValueError): UPat(name="ctx")

def test_const_value_first_order() -> None:
  assert UOp.const(4, I32) is c(4) and UOp.const(I32, 4) is c(4)

# ***** graph_rewrite's walks *****

def _visit(order: list, tag: str) -> PatternMatcher:
  def rule(ctx: list, x: UOp) -> None: ctx.append((x.arg if x.op is Ops.CONST else x.op, tag))
  return PatternMatcher([(UPat(GroupOp.All, name="x"), rule)])

def test_bidirectional_visit_order() -> None:
  seen: list = []
  graph_rewrite(c(1) + c(2), _visit(seen, "pm"), ctx=seen, bpm=_visit(seen, "bpm"))
  assert seen == [(Ops.ADD, "bpm"), (1, "bpm"), (1, "pm"), (2, "bpm"), (2, "pm"), (Ops.ADD, "pm")]

def test_bottom_up_rewrites_before_the_sources() -> None:
  a, b, d = Variable("a", 0, 9), Variable("b", 0, 9), Variable("d", 0, 9)
  f = UOp.variable("f", -1.0, 1.0, dtypes.float32)
  # the outer node is replaced first, so the inner key is replaced inside the replacement too
  assert graph_rewrite(f.sin().sin(), _substitute, {f.sin(): f.sqrt(), f.sin().sin(): f.sin().sqrt()},
                       bottom_up=True) is f.sqrt().sqrt()
  # post-order: the inner node changes first, and the outer one no longer matches
  assert graph_rewrite(f.sin().sin(), _substitute, {f.sin(): f.sqrt(), f.sin().sin(): f.sin().sqrt()}) is \
    f.sqrt().sin()
  e = Variable("e", 0, 9)
  assert graph_rewrite(a + 4, _substitute, {a: b + d, b: e}, bottom_up=True) is (e + d) + 4
  # a replacement that holds the replaced node grows without end: an error, not a hang
  with Context(REWRITE_STACK_LIMIT=1000):
    with pytest.raises(RuntimeError, match="keep rewriting"): graph_rewrite(a + 4, _substitute, {a: a + d},
                                                                            bottom_up=True)

def test_walk_visits_once_and_never_enters_a_result() -> None:
  a, b, d, e = (Variable(n, 0, 9) for n in "abde")
  assert graph_rewrite(a + 4, _substitute, {a: b + d, b: e}, walk=True) is (b + d) + 4
  flip = PatternMatcher([(UPat(Ops.CONST, arg=3, name="x"), lambda x: x.const_like(4)),
                         (UPat(Ops.CONST, arg=4, name="x"), lambda x: x.const_like(3))])
  assert graph_rewrite(c(3), flip, walk=True) is c(4)
  assert graph_rewrite(c(3), flip, bottom_up=True, walk=True) is c(4)
  seen: list = []
  graph_rewrite(c(1) + c(2), _visit(seen, "pm"), ctx=seen, bpm=_visit(seen, "bpm"), walk=True)
  assert seen == [(Ops.ADD, "bpm"), (1, "bpm"), (1, "pm"), (2, "bpm"), (2, "pm"), (Ops.ADD, "pm")]

def test_rules_that_undo_each_other_raise() -> None:
  flip = PatternMatcher([(UPat(Ops.CONST, arg=3, name="x"), lambda x: x.const_like(4)),
                         (UPat(Ops.CONST, arg=4, name="x"), lambda x: x.const_like(3))])
  with Context(REWRITE_STACK_LIMIT=100):
    with pytest.raises(RuntimeError, match="keep rewriting"): graph_rewrite(c(3) + 1, flip)
  with pytest.raises(RuntimeError, match="circle"): graph_rewrite(c(3), flip, bottom_up=True)

def test_bottom_up_gate_keeps_the_node_and_skips_its_sources() -> None:
  def never(x: UOp) -> None: raise AssertionError(f"visited {x.op}")
  def gate(x: UOp) -> None: raise BottomUpGate
  a, b = Variable("a", 0, 9), Variable("b", 0, 9)
  pm = PatternMatcher([(UPat(Ops.ADD, name="x"), gate), (UPat(Ops.MUL, name="x"), never)])
  assert graph_rewrite(a * a + b * a, pm, bottom_up=True) is a * a + b * a
  # a rewrite then a gate: the node stays as the last rewrite left it
  pm2 = PatternMatcher([(UPat(Ops.ADD, src=(UPat.var("x"), UPat.var("x"))), lambda x: x * 2),
                        (UPat(Ops.MUL, name="x"), gate), (UPat(Ops.CONST, name="x"), never)])
  assert graph_rewrite(a + a, pm2, bottom_up=True) is a * 2

def test_done_is_keyword_only() -> None:
  with pytest.raises(TypeError, match="keyword"): graph_rewrite(c(1), _substitute, {}, {})  # type: ignore[arg-type]

def test_call_bodies_are_left_alone_unless_entered() -> None:
  three = PatternMatcher([(UPat(Ops.CONST, arg=3, name="x"), lambda x: x.const_like(4))])
  call = UOp(Ops.CALL, dtypes.void, (UOp(Ops.SINK, dtypes.void, (c(3),)), c(3)))
  assert graph_rewrite(call, three) is UOp(Ops.CALL, dtypes.void, (call.src[0], c(4)))
  assert graph_rewrite(call, three, enter_calls=True) is UOp(Ops.CALL, dtypes.void, (UOp(Ops.SINK, dtypes.void,
                                                                                           (c(4),)), c(4)))

def test_substitute_extra_pm_replaces_before_visiting() -> None:
  visited: list[int] = []
  def visit(k: UOp) -> None: visited.append(k.arg)
  x = c(3) + c(4)
  out = (x + c(2)).substitute({x: c(7)}, extra_pm=PatternMatcher([(UPat(Ops.CONST, name="k"), visit)]))
  assert out is c(7) + c(2) and 3 not in visited and 4 not in visited

# ***** tracking *****

@pytest.fixture
def tracking():
  for lst in (ops.tracked_keys, ops.tracked_ctxs, ops.active_rewrites, ops.active_group, ops._name_cnt): lst.clear()
  with Context(TRACK_MATCH_STATS=2): yield
  for lst in (ops.tracked_keys, ops.tracked_ctxs, ops.active_rewrites, ops.active_group, ops._name_cnt): lst.clear()

def test_rewrite_group_records_named_steps(tracking: None) -> None:
  a = Variable("a", 0, 9)
  @rewrite_group()
  def run(u: UOp) -> UOp:
    u = graph_rewrite(u, PatternMatcher([(UPat(Ops.MUL, src=(UPat.var("x"), UPat.const(I32, 1))), lambda x: x)]),
                      name="drop *1")
    return graph_rewrite(u, PatternMatcher([]), name="nothing")
  assert run(a * 1) is a
  run(a * 1)
  assert ops.tracked_keys == ["run n1", "run n2"]
  steps = ops.tracked_ctxs[0]
  assert [s.name for s in steps] == ["drop *1", "nothing"] and steps[0].sink is a * 1
  assert [(m[0], m[1]) for m in steps[0].matches] == [(a * 1, a)] and steps[1].matches == []

def test_rewrite_group_name_function_and_nested_steps(tracking: None) -> None:
  @rewrite_group(new_ctx=False)
  def step(u: UOp) -> UOp: return graph_rewrite(u, PatternMatcher([]), name="inner")
  @rewrite_group(name=lambda u, ret: f"rewrite of {u.render()}")
  def outer(u: UOp) -> UOp: return step(u)
  outer(Variable("a", 0, 9) + 1)
  assert ops.tracked_keys == ["rewrite of (a+1) n1"]
  assert [(s.name, s.depth) for s in ops.tracked_ctxs[0]] == [("step", 0), ("inner", 1)]
  with pytest.raises(AssertionError, match="invalid match tracing input"): step("not a UOp")  # type: ignore[arg-type]

def test_untracked_rewrite_group_just_runs() -> None:
  before = len(ops.tracked_keys)
  @rewrite_group()
  def f(x: int) -> int: return x + 1
  assert f(1) == 2 and len(ops.tracked_keys) == before

def test_tracked_pattern_matcher_counts() -> None:
  p = UPat(Ops.MUL, src=(UPat.var("x"), UPat.const(I32, 1)))
  pm = TrackedPatternMatcher([(p, lambda x: x)])
  a = Variable("a", 0, 9)
  assert graph_rewrite(a * 1 + a * 2, pm) is a + a * 2
  fired, tried = ops.match_stats[p][:2]
  assert (fired, tried) == (1, 2)

def test_sink_as_method_and_function() -> None:
  a, b = c(1), c(2)
  assert a.sink(b) is UOp.sink(a, b) is UOp(Ops.SINK, dtypes.void, (a, b))
  assert UOp.sink(a, None) is UOp(Ops.SINK, dtypes.void, (a,))

# ***** pickling rule tables (to hand them to another process) *****

def test_rule_tables_pickle_with_their_lambdas() -> None:
  from attograd.uop.symbolic import sym
  back = pickle.loads(pickle.dumps(sym))
  a = Variable("a", 0, 10)
  e = (a * 4 + 8) // 4 + (a + 0) * 1
  assert graph_rewrite(e, back) is e.simplify()
  assert [p.location for p, _ in back.patterns] == [p.location for p, _ in sym.patterns]
  pm = PatternMatcher([(UPat.cvar("x"), lambda x: x * 2)])
  assert pickle.loads(pickle.dumps(pm)).rewrite(c(2)) is c(2) * 2

def test_deconstruct_function() -> None:
  def nested() -> list: return [[math.pi for _ in range(2)] for _ in range(2)]
  assert types.FunctionType(*deconstruct_function(nested))() == nested()
  k = 3
  with pytest.raises(ValueError, match="closure"): deconstruct_function(lambda: k)

def test_upat_location_is_where_it_was_written() -> None:
  p, line = UPat(Ops.CONST, I32), inspect.currentframe().f_lineno  # type: ignore[union-attr]
  assert p.location == (__file__, line)
  v = UPat.var("x")  # built by a helper in ops.py: still this line
  assert v.location[0] == __file__
  assert p.named("y").location[0] == __file__ and p.named("y").location[1] != line

def test_key_is_a_content_hash() -> None:
  a = Variable("a", 0, 9)
  k = (a + 1).key
  assert isinstance(k, bytes) and len(k) == 32 and (a + 1).key == k
  assert (a + 2).key != k and (a + 1).rtag().key != k and UOp(Ops.ADD, I32, (c(1), a)).key != k
  # from the content alone (no ids or addresses), so another process computes the same bytes
  assert c(1).key == hashlib.sha256(repr((Ops.CONST, I32, 1, None)).encode()).digest()
  deep = a
  for _ in range(5000): deep = deep + 1  # iterative: no recursion limit
  assert len(deep.key) == 32
