"""Continuous batching (attograd/llm/batch.py) with stories260K: more prompts than slots give the answers of one
prompt at a time; a failing request and a cancelled one leave the others running."""
from __future__ import annotations
import os, threading
import pytest
from attograd.llm.batch import Engine, Request, generate_batched
from attograd.llm.generate import LLM
from attograd.llm.sampling import Sampler
from helpers import llm_data_dir

STORIES = os.path.join(llm_data_dir(), "stories260K.gguf")
pytestmark = pytest.mark.skipif(not os.path.exists(STORIES), reason=f"the shared LLM files are missing ({STORIES})")

def test_more_prompts_than_slots_equal_sequential() -> None:
  llm = LLM.load(STORIES, max_context=96)
  prompts = [llm.encode(p) for p in ("Once upon a time", "The dog", "Lily saw a", "One day", "Tom and", "The sun")]
  want = [llm.generate(p, Sampler(), 10 + i) for i, p in enumerate(prompts)]
  engine = Engine(llm, slots=4).start()
  try:
    got = [generate_batched(engine, [p], Sampler(), 10 + i)[0] for i, p in enumerate(prompts)]
    assert got == want
    done = threading.Semaphore(0)
    outs: dict[int, list[str | None]] = {}
    def emitter(i: int):  # type: ignore[no-untyped-def]
      def emit(text: str, finish: str | None) -> None:
        outs.setdefault(i, []).append(text if finish is None else f"{text}|{finish}")
        if finish is not None: done.release()
      return emit
    reqs = [Request(p, Sampler(), 10 + i, [], emitter(i)) for i, p in enumerate(prompts)]
    reqs.append(Request([1, 10 ** 6], Sampler(), 5, [], emitter(99)))  # a token id outside the vocabulary
    reqs[1].cancel()  # a client that left before its turn
    for r in reqs: engine.submit(r)
    for _ in reqs: done.acquire()
    assert outs[99][-1].startswith("|error: ") and "outside the vocabulary" in outs[99][-1]
    assert outs[1] == ["|length"] and reqs[1].stats.generated == 0
    for i in (0, 2, 3, 4, 5):
      text, finish = "".join(outs[i][:-1]) + outs[i][-1].split("|")[0], outs[i][-1].split("|")[1]
      assert text == want[i] and finish == "length"
  finally: engine.close()
