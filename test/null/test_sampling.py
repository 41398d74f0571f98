"""Sampler: greedy, temperature, top-k, top-p, repetition penalty, seeding, and that draws follow the distribution."""
import math
from collections import Counter
import pytest
from attograd import Tensor
from attograd.llm.sampling import Sampler

LOGITS = [1.0, 3.0, 2.0, -1.0, 2.5, 0.0]

def softmax(xs, t=1.0):
  m = max(xs)
  e = [math.exp((x - m) / t) for x in xs]
  return [v / sum(e) for v in e]

def test_greedy_is_first_argmax():
  assert Sampler()(LOGITS) == 1
  assert Sampler()([0.5, 2.0, 2.0]) == 1  # ties: the first, like llama2.c
  assert Sampler()(Tensor(LOGITS)) == 1  # a Tensor: argmax on the device

def test_greedy_ignores_seed_and_top_k():
  assert {Sampler(temperature=0.0, top_k=3, seed=s)(LOGITS) for s in range(5)} == {1}

def test_repetition_penalty():
  # 3.0 / 2 = 1.5 falls below 2.5: token 4 wins; a negative logit is multiplied, so it drops further
  s = Sampler(repeat_penalty=2.0)
  assert s(LOGITS, history=[1]) == 4
  assert s(Tensor(LOGITS), history=[1]) == 4  # a Tensor with a penalty: the logits come back to the host
  assert s.probabilities(LOGITS, [1]) == {4: 1.0}
  p = Sampler(temperature=1.0, repeat_penalty=2.0).probabilities([0.0, -1.0], history=[1])
  assert p[1] == pytest.approx(softmax([0.0, -2.0])[1])
  # only the last repeat_last_n tokens count
  assert Sampler(repeat_penalty=2.0, repeat_last_n=1)(LOGITS, history=[1, 0]) == 1

def test_top_k_and_top_p_sets():
  assert set(Sampler(temperature=1.0, top_k=2).probabilities(LOGITS)) == {1, 4}
  p = softmax(LOGITS)  # sorted: 1 (.48), 4 (.29), 2 (.18), ...
  assert set(Sampler(temperature=1.0, top_p=0.5).probabilities(LOGITS)) == {1, 4}
  assert set(Sampler(temperature=1.0, top_p=0.4).probabilities(LOGITS)) == {1}
  assert set(Sampler(temperature=1.0, top_p=p[1] + p[4] + 1e-3).probabilities(LOGITS)) == {1, 4, 2}
  both = Sampler(temperature=1.0, top_k=3, top_p=0.99).probabilities(LOGITS)
  assert set(both) == {1, 4, 2} and sum(both.values()) == pytest.approx(1.0)

def test_temperature_shapes_distribution():
  for t in (0.5, 1.0, 2.0):
    probs = Sampler(temperature=t).probabilities(LOGITS)
    want = softmax(LOGITS, t)
    for i, v in probs.items(): assert v == pytest.approx(want[i], rel=1e-9)

@pytest.mark.parametrize("kw", [dict(temperature=1.0), dict(temperature=0.7, top_k=3),
                                dict(temperature=1.3, top_p=0.8)])
def test_draws_follow_distribution(kw):
  s = Sampler(seed=1234, **kw)
  n = 20000
  counts = Counter(s(LOGITS) for _ in range(n))
  probs = s.probabilities(LOGITS)
  assert set(counts) <= set(probs)  # nothing outside the kept set
  # each frequency within 5 standard deviations of its probability
  for i, p in probs.items():
    assert abs(counts[i] / n - p) < 5 * math.sqrt(p * (1 - p) / n) + 1e-9, (i, counts[i] / n, p)

def test_seeded_is_deterministic():
  s1, s2, s3 = Sampler(temperature=1.0, seed=7), Sampler(temperature=1.0, seed=7), Sampler(temperature=1.0, seed=8)
  seq1, seq2, seq3 = [s1(LOGITS) for _ in range(50)], [s2(LOGITS) for _ in range(50)], [s3(LOGITS) for _ in range(50)]
  assert seq1 == seq2 and seq1 != seq3
  assert Sampler(temperature=1.0, seed=7)(Tensor(LOGITS)) == seq1[0]  # a Tensor gives the same draw as its list

@pytest.mark.parametrize("kw", [dict(temperature=-1.0), dict(temperature=float("nan")), dict(top_k=-1), dict(top_k=1.5),
                                dict(top_p=0.0), dict(top_p=1.5), dict(repeat_penalty=0.0), dict(repeat_last_n=-2)])
def test_bad_parameters(kw):
  with pytest.raises(ValueError): Sampler(**kw)

def test_bad_logits():
  with pytest.raises(ValueError, match="empty"): Sampler()([])
  with pytest.raises(ValueError, match="finite"): Sampler(temperature=1.0)([float("-inf"), float("-inf")])
