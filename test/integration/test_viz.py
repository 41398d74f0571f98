"""VIZ=1: a program's schedules and kernels (each kernel's graph at every stage, each rewrite step with the rule that
fired, the linear program, the source, the optimizations, the run times) served at exit on 127.0.0.1:VIZ_PORT; the
page is checked in headless Chromium (kernel list populated, a click draws a graph, a rewrite steps forward and back)
and a screenshot is taken."""
from __future__ import annotations
import json, os, socket, subprocess, sys, time, urllib.request
from typing import Any, Iterator
import pytest
from chromium import CHROMIUM, SKIP_REASON, chromium_page

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PROGRAM = ("from attograd import Tensor\na = Tensor.arange(16).reshape(4, 4).float()\n"
           "print((a @ a.T).relu().sum(1).tolist())\n")

def _free_port() -> int:
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]

def _get(url: str) -> Any: return json.loads(urllib.request.urlopen(url, timeout=30).read())

@pytest.fixture(scope="module")
def viz_server() -> Iterator[str]:
  port = _free_port()
  env = {**os.environ, "VIZ": "1", "VIZ_PORT": str(port), "DEV": "CPU", "PYTHONPATH": ROOT}
  proc = subprocess.Popen([sys.executable, "-c", PROGRAM], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
  base = f"http://127.0.0.1:{port}"
  try:
    deadline = time.time() + 120
    while True:
      assert proc.poll() is None, f"the program exited: {proc.stdout.read() if proc.stdout else ''}"
      try:
        _get(base + "/data.json")
        break
      except OSError:
        assert time.time() < deadline, "the VIZ server did not start"
        time.sleep(0.2)
    yield base
  finally:
    proc.terminate()
    proc.wait(10)

def test_viz_data(viz_server: str) -> None:
  data = _get(viz_server + "/data.json")
  assert len(data["schedules"]) == 1 and data["schedules"][0]["kernels"]
  assert data["kernels"] and all(k["runs"] for k in data["kernels"])  # each kernel ran and was timed
  k = _get(viz_server + "/kernel/0.json")
  kinds = [e["kind"] for e in k["timeline"]]
  names = [e["name"] for e in k["timeline"]]
  assert kinds[0] == "graph" and "rewrite" in kinds
  assert "linearized program" in names and "CPU source" in names
  src = next(e["text"] for e in k["timeline"] if e["name"] == "CPU source")
  assert f"void {k['name']}(" in src
  rw = next(e for e in k["timeline"] if e["kind"] == "rewrite")
  step = rw["steps"][0]
  assert step["rule"]["where"].startswith("attograd/") and step["before"]["nodes"] and step["after"]["nodes"]
  assert urllib.request.urlopen(viz_server + "/dagre.min.js", timeout=30).read().startswith(b"(function")

@pytest.mark.skipif(CHROMIUM is None, reason=SKIP_REASON)
def test_viz_page_in_headless_chromium(viz_server: str, tmp_path) -> None:
  with chromium_page(viz_server + "/") as ws:
    assert ws.wait_for("document.querySelectorAll('#klist .kernel').length", "the kernel list") >= 2
    ws.eval("document.querySelector('#klist .kernel').click()")
    assert ws.wait_for("document.querySelectorAll('#timeline .stage').length", "the kernel's pipeline") > 3
    ws.eval("document.querySelector('#timeline .stage[data-kind=graph]').click()")
    assert ws.wait_for("document.querySelectorAll('#view svg rect.node').length", "a drawn graph") > 3
    ws.eval("document.querySelector('#timeline .stage[data-kind=rewrite]').click()")
    assert ws.wait_for("document.getElementById('stepinfo').textContent", "the rewrite view") == "input graph"
    ws.eval("document.getElementById('next').click()")
    assert ws.eval("document.getElementById('stepinfo').textContent").startswith("step 1 of")
    assert "rule " in ws.eval("document.querySelector('.rule').textContent")
    assert ws.eval("document.querySelectorAll('#view svg').length") == 2  # matched and replaced-by graphs
    ws.eval("document.getElementById('prev').click()")
    assert ws.eval("document.getElementById('stepinfo').textContent") == "input graph"
    ws.eval("document.querySelector('#timeline .stage[data-kind=graph]').click()")
    png = ws.call("Page.captureScreenshot", format="png")["data"]
    import base64
    shot = tmp_path / "viz.png"
    shot.write_bytes(base64.b64decode(png))
    if (keep := os.getenv("VIZ_SCREENSHOT")): shot.rename(keep)
    assert len(base64.b64decode(png)) > 10_000
