"""Hello attograd: fit y = 3x + 2 by gradient descent, with the gradients written out by hand.

Run it with `python examples/hello.py` (add DEBUG=2 to see every kernel, DEV=PYTHON to run without a C compiler).
"""
import random, time
from attograd import Device, Tensor

N, STEPS, LR = 256, 60, 0.5
TRUE_W, TRUE_B = 3.0, 2.0

def make_data(n: int) -> tuple[Tensor, Tensor]:
  # plain Python data, so this example needs nothing but attograd itself
  rng = random.Random(0)
  xs = [rng.uniform(-1.0, 1.0) for _ in range(n)]
  ys = [TRUE_W * x + TRUE_B + rng.gauss(0.0, 0.01) for x in xs]
  return Tensor(xs).reshape(n, 1), Tensor(ys).reshape(n, 1)  # (N, 1), (N, 1)

def main() -> None:
  X, Y = make_data(N)
  w, b = Tensor([[0.0]]), Tensor([0.0])  # (1, 1), (1,)
  st = time.perf_counter()
  for step in range(STEPS + 1):
    err = X @ w + b - Y  # (N, 1)
    # loss = mean(err^2), so dloss/dw = 2 * X^T err / N and dloss/db = 2 * mean(err)
    dw = (X.T @ err) * (2.0 / N)  # (1, 1)
    db = err.mean(axis=0) * 2.0  # (1,)
    if step % 10 == 0: print(f"step {step:3d}  loss {(err * err).mean().item():.6f}")
    # realize every step: the next step then starts from two small buffers, not an ever-growing graph
    w, b = w - dw * LR, b - db * LR
    Tensor.realize(w, b)
  w_fit, b_fit = w.item(), b.item()
  print(f"learned w = {w_fit:.4f}, b = {b_fit:.4f}  (true {TRUE_W}, {TRUE_B})  "
        f"on {Device.DEFAULT} in {time.perf_counter() - st:.2f} s")
  if abs(w_fit - TRUE_W) > 0.05 or abs(b_fit - TRUE_B) > 0.05:
    raise SystemExit("hello.py: the fit did not converge; this is a bug in attograd, please report it")

if __name__ == "__main__":
  main()
