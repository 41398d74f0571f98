"""Choosing the next token from logits: greedy, or sampling with temperature, top-k, top-p (nucleus) and a repetition
penalty, from the sampler's own seeded random generator (the same seed gives the same tokens)."""
from __future__ import annotations
import math, random
from typing import Any, Sequence

class Sampler:
  """Picks a token id from a vector of logits. The steps, in order (Hugging Face's order):
  1. repetition penalty: each distinct token among the last `repeat_last_n` of `history` gets its logit divided by
     `repeat_penalty` when positive, multiplied when negative (CTRL, llama.cpp);
  2. temperature 0 means greedy: the first largest logit; else logits are divided by `temperature`;
  3. top-k keeps the k largest (0 keeps all); 4. top-p keeps the smallest set of most likely tokens whose
     probabilities add up to at least top_p (1.0 keeps all); 5. one token is drawn from what remains.

  >>> Sampler(temperature=0.0)([0.1, 2.0, -1.0])
  1
  >>> s = Sampler(temperature=1.0, top_k=1, seed=0); s([0.1, 2.0, -1.0])
  1
  """
  def __init__(self, temperature: float = 0.0, top_k: int = 0, top_p: float = 1.0, repeat_penalty: float = 1.0,
               repeat_last_n: int = 64, seed: int | None = None):
    if not isinstance(temperature, (int, float)) or not 0.0 <= temperature <= 100.0 or math.isnan(temperature):
      raise ValueError(f"Sampler: temperature must be a number in [0, 100], got {temperature!r}")
    if not isinstance(top_k, int) or isinstance(top_k, bool) or top_k < 0:
      raise ValueError(f"Sampler: top_k must be an integer >= 0 (0 keeps all tokens), got {top_k!r}")
    if not isinstance(top_p, (int, float)) or not 0.0 < top_p <= 1.0:
      raise ValueError(f"Sampler: top_p must be in (0, 1], got {top_p!r}")
    if not isinstance(repeat_penalty, (int, float)) or not 0.0 < repeat_penalty <= 100.0:
      raise ValueError(f"Sampler: repeat_penalty must be in (0, 100] (1 turns it off), got {repeat_penalty!r}")
    if not isinstance(repeat_last_n, int) or repeat_last_n < 0:
      raise ValueError(f"Sampler: repeat_last_n must be an integer >= 0, got {repeat_last_n!r}")
    self.temperature, self.top_k, self.top_p = float(temperature), top_k, float(top_p)
    self.repeat_penalty, self.repeat_last_n = float(repeat_penalty), repeat_last_n
    self.seed = seed
    self.rng = random.Random(seed)

  @property
  def greedy(self) -> bool: return self.temperature == 0.0

  def __call__(self, logits: Any, history: Sequence[int] = ()) -> int:
    """The next token; `logits` is a list of floats or a 1-D Tensor, `history` the tokens so far."""
    if not isinstance(logits, list):
      if self.greedy and not self._penalizes(history): return int(logits.argmax().item())  # one number comes back
      logits = logits.tolist()
    logits = self._penalized(logits, history)
    if self.greedy: return max(range(len(logits)), key=logits.__getitem__)
    ids, weights = self._kept(logits)
    total = sum(weights)
    if not math.isfinite(total): raise ValueError("Sampler: the logits contain NaN")
    u = self.rng.random() * total
    acc = 0.0
    for i, w in zip(ids, weights):
      acc += w
      if u < acc: return i
    return ids[-1]  # u rounded up to the total

  def probabilities(self, logits: list[float], history: Sequence[int] = ()) -> dict[int, float]:
    """The distribution __call__ draws from, as {id: probability}; greedy gives {argmax: 1.0}."""
    if self.greedy: return {self(list(logits), history): 1.0}
    ids, weights = self._kept(self._penalized(list(logits), history))
    total = sum(weights)
    return {i: w / total for i, w in zip(ids, weights)}

  def needs_logits(self, history: Sequence[int]) -> bool:
    """False when the pick is plain argmax (greedy, no penalty to apply): a model can then give its argmax directly."""
    return not self.greedy or self._penalizes(history)

  def _penalizes(self, history: Sequence[int]) -> bool:
    return self.repeat_penalty != 1.0 and self.repeat_last_n > 0 and len(history) > 0

  def _penalized(self, logits: list[float], history: Sequence[int]) -> list[float]:
    if not logits: raise ValueError("Sampler: empty logits")
    if not self._penalizes(history): return logits
    out = list(logits)
    for t in set(history[-self.repeat_last_n:]):
      if 0 <= t < len(out): out[t] = out[t] / self.repeat_penalty if out[t] > 0 else out[t] * self.repeat_penalty
    return out

  def _kept(self, logits: list[float]) -> tuple[list[int], list[float]]:
    """Ids left after top-k and top-p, most likely first, with unnormalized weights exp((logit - max) / T)."""
    n = len(logits)
    if 0 < self.top_k < n:
      # the k-th largest value from a C-speed sort of plain floats, then only the few ids at or above it are ordered
      threshold = sorted(logits, reverse=True)[self.top_k - 1]
      ids = sorted((i for i, v in enumerate(logits) if v >= threshold), key=lambda i: (-logits[i], i))[:self.top_k]
    else: ids = sorted(range(n), key=lambda i: (-logits[i], i))
    top = logits[ids[0]]
    if not math.isfinite(top): raise ValueError(f"Sampler: logits must be finite, the largest is {top}")
    inv_t = 1.0 / self.temperature
    weights = [math.exp((logits[i] - top) * inv_t) for i in ids]
    if self.top_p < 1.0:
      goal, acc, need = self.top_p * sum(weights), 0.0, 0
      while need < len(weights) and acc < goal:
        acc += weights[need]
        need += 1
      ids, weights = ids[:need], weights[:need]
    return ids, weights
