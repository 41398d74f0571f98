"""The OpenAI-compatible server over real HTTP (urllib) with stories260K: completions and chat completions, JSON and
server-sent events, models, errors that leave the server serving; and the chat page driven in headless Chromium
through the DevTools protocol (a small websocket client written here)."""
from __future__ import annotations
import base64, json, os, shutil, socket, struct, subprocess, tempfile, threading, time, urllib.error, urllib.parse
import urllib.request
from typing import Any, Iterator
import pytest
from attograd.llm.generate import LLM
from attograd.llm.sampling import Sampler
from attograd.llm.server import LLMServer

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STORIES = os.path.join(os.path.dirname(ROOT), "shared", "datasets", "llm", "stories260K.gguf")
pytestmark = pytest.mark.skipif(not os.path.exists(STORIES), reason=f"the shared LLM files are missing ({STORIES})")
CONTEXT = 256

@pytest.fixture(scope="module")
def server() -> Iterator[tuple[str, LLM]]:
  llm = LLM.load(STORIES, max_context=CONTEXT)
  srv = LLMServer(("127.0.0.1", 0), llm)
  th = threading.Thread(target=srv.serve_forever, daemon=True)
  th.start()
  try: yield f"http://127.0.0.1:{srv.server_address[1]}", llm
  finally:
    srv.shutdown()
    srv.server_close()

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
  assert status == 200 and ctype == "text/event-stream"
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

def test_concurrent_requests_are_serialized(server: tuple[str, LLM]) -> None:
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

# ***** the chat page in headless Chromium, over the DevTools protocol *****

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")

class WebSocket:
  """Just enough of RFC 6455 for DevTools: text frames, client-masked, no extensions."""
  def __init__(self, url: str):
    u = urllib.parse.urlparse(url)
    self.sock = socket.create_connection((u.hostname, u.port), timeout=60)
    key = base64.b64encode(os.urandom(16)).decode()
    self.sock.sendall(f"GET {u.path} HTTP/1.1\r\nHost: {u.hostname}:{u.port}\r\n"
                      "Upgrade: websocket\r\nConnection: Upgrade\r\n"
                      f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n".encode())
    head = b""
    while b"\r\n\r\n" not in head: head += self.sock.recv(1)
    assert head.startswith(b"HTTP/1.1 101"), head
    self.next_id = 0

  def _exact(self, n: int) -> bytes:
    out = b""
    while len(out) < n:
      chunk = self.sock.recv(n - len(out))
      if not chunk: raise ConnectionError("DevTools closed the websocket")
      out += chunk
    return out

  def send(self, text: str) -> None:
    data, mask = text.encode(), os.urandom(4)
    n = len(data)
    head = bytes([0x81]) + (bytes([0x80 | n]) if n < 126 else bytes([0x80 | 126]) + struct.pack(">H", n) if n < 65536
                            else bytes([0x80 | 127]) + struct.pack(">Q", n))
    self.sock.sendall(head + mask + bytes(b ^ mask[i % 4] for i, b in enumerate(data)))

  def recv(self) -> str:
    parts = []
    while True:
      b0, b1 = self._exact(2)
      n = b1 & 0x7F
      if n == 126: n = struct.unpack(">H", self._exact(2))[0]
      elif n == 127: n = struct.unpack(">Q", self._exact(8))[0]
      payload = self._exact(n)
      if b0 & 0x0F == 8: raise ConnectionError("DevTools closed the websocket")
      if b0 & 0x0F in (0, 1, 2): parts.append(payload)
      if b0 & 0x80 and b0 & 0x0F in (0, 1, 2): return b"".join(parts).decode()

  def call(self, method: str, **params: Any) -> Any:
    self.next_id += 1
    self.send(json.dumps({"id": self.next_id, "method": method, "params": params}))
    while True:
      msg = json.loads(self.recv())
      if msg.get("id") == self.next_id:
        if "error" in msg: raise RuntimeError(f"DevTools {method}: {msg['error']}")
        return msg["result"]

  def eval(self, js: str) -> Any:
    r = self.call("Runtime.evaluate", expression=js, returnByValue=True)
    if "exceptionDetails" in r: raise RuntimeError(f"page script failed: {r['exceptionDetails']}")
    return r["result"].get("value")

@pytest.mark.skipif(CHROMIUM is None, reason="chromium is not installed (apt-get install -y chromium chromium-driver)")
def test_chat_page_in_headless_chromium(server: tuple[str, LLM]) -> None:
  base, llm = server
  profile = tempfile.mkdtemp(prefix="attograd-chromium-")
  proc = subprocess.Popen([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                           "--disable-background-networking", "--disable-component-update", "--disable-sync",
                           f"--user-data-dir={profile}", "--remote-debugging-port=0", "about:blank"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
  try:
    port_file = os.path.join(profile, "DevToolsActivePort")
    deadline = time.time() + 60
    while not (os.path.exists(port_file) and open(port_file).read().count("\n") >= 1):
      assert proc.poll() is None, "chromium exited at start"
      assert time.time() < deadline, "chromium did not open its DevTools port"
      time.sleep(0.1)
    port = int(open(port_file).read().split()[0])
    pages = json.loads(urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=30).read())
    ws = WebSocket(next(p for p in pages if p["type"] == "page")["webSocketDebuggerUrl"])
    ws.call("Page.enable")
    ws.call("Page.navigate", url=base + "/?temperature=0&max_tokens=24")
    def wait_for(js: str, what: str, secs: float = 120) -> Any:
      end = time.time() + secs
      while time.time() < end:
        try:
          if (v := ws.eval(js)): return v
        except RuntimeError: pass  # the page is still loading
        time.sleep(0.1)
      raise AssertionError(f"timed out waiting for {what}")
    assert wait_for("(document.getElementById('model') || {}).textContent === 'stories260K'",
                    "the page to load the model list")
    # type the prompt into the box and press Enter, as a user would
    ws.eval("document.getElementById('prompt').focus()")
    ws.call("Input.insertText", text="Once upon a time")
    for kind in ("keyDown", "keyUp"):
      ws.call("Input.dispatchKeyEvent", type=kind, key="Enter", code="Enter", windowsVirtualKeyCode=13)
    answer = wait_for("(document.querySelector('.msg.assistant[data-done]') || {}).textContent",
                      "the streamed answer")
    msgs = [{"role": "user", "content": "Once upon a time"}]
    assert answer == direct(llm, llm.chat_prompt(msgs), 24)
    assert ws.eval("document.querySelector('.msg.user').textContent") == "Once upon a time"
    assert ws.eval("document.querySelectorAll('.msg.error').length") == 0
    assert "24 tokens" in ws.eval("document.querySelector('.stats').textContent")
  finally:
    proc.terminate()
    try: proc.wait(10)
    except subprocess.TimeoutExpired: proc.kill()
    shutil.rmtree(profile, ignore_errors=True)
