"""Headless Chromium driven through the DevTools protocol, for tests of the web pages attograd serves (the LLM chat
page, the VIZ graph explorer): a small websocket client written here, no browser-driver package needed."""
from __future__ import annotations
import base64, contextlib, json, os, shutil, socket, struct, subprocess, tempfile, time, urllib.parse, urllib.request
from typing import Any, Iterator

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
SKIP_REASON = "chromium is not installed (apt-get install -y chromium chromium-driver)"

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

  def wait_for(self, js: str, what: str, secs: float = 120) -> Any:
    """Poll `js` in the page until it gives a truthy value."""
    end = time.time() + secs
    while time.time() < end:
      try:
        if (v := self.eval(js)): return v
      except RuntimeError: pass  # the page is still loading
      time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")

@contextlib.contextmanager
def chromium_page(url: str) -> Iterator[WebSocket]:
  """A headless Chromium showing `url`, as a DevTools connection to its page; closed afterwards."""
  assert CHROMIUM is not None, SKIP_REASON
  profile = tempfile.mkdtemp(prefix="attograd-chromium-")
  # no background networking: this machine's closed network refuses those connections, slowly
  proc = subprocess.Popen([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                           "--disable-background-networking", "--disable-component-update", "--disable-sync",
                           "--window-size=1400,900", f"--user-data-dir={profile}", "--remote-debugging-port=0",
                           "about:blank"],
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
    ws.call("Page.navigate", url=url)
    yield ws
  finally:
    proc.terminate()
    try: proc.wait(10)
    except subprocess.TimeoutExpired: proc.kill()
    shutil.rmtree(profile, ignore_errors=True)
