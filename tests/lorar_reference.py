"""A numpy re-implementation of Algorithm 1 of the Lorar paper, for tests.

Model: linear regression y_hat = x·W + b with the mean squared error of
`tf.keras.losses.MeanSquaredError` (mean over the batch; one output). Client
optimizer: plain SGD. Server: SGD with optional heavy-ball momentum, written
out by hand (buf = momentum·buf + Δ; w -= lr·buf), as in PyTorch and TFF's
`build_sgdm`. Everything is float64; the TFF process runs in float32.
"""

import dataclasses
from typing import Optional

import numpy as np


@dataclasses.dataclass
class Client:
  x: np.ndarray  # [n, d]
  y: np.ndarray  # [n, 1]
  batch_size: int
  learning_rate: float
  num_epochs: int = 1


@dataclasses.dataclass
class ClientRound:
  delta_w: np.ndarray
  delta_b: np.ndarray
  batch_losses: list
  num_examples: int  # |D_i|, one epoch

  @property
  def loss_reduction(self) -> float:
    if not self.batch_losses:
      return 0.0
    return max(self.batch_losses) - min(self.batch_losses)

  @property
  def valid(self) -> bool:
    return (
        self.num_examples > 0
        and all(np.isfinite(self.batch_losses))
        and np.all(np.isfinite(self.delta_w))
        and np.all(np.isfinite(self.delta_b))
    )


def train_client(w, b, client: Client, proximal_strength: float) -> ClientRound:
  """Local SGD on one client; returns Δw = w_global - w_local and losses."""
  w_local, b_local = w.copy(), b.copy()
  losses = []
  n = len(client.x)
  with np.errstate(all='ignore'):
    for _ in range(client.num_epochs):
      for start in range(0, n, client.batch_size):
        xb = client.x[start:start + client.batch_size]
        yb = client.y[start:start + client.batch_size]
        residual = xb @ w_local + b_local - yb  # [m, 1]
        m = len(xb)
        losses.append(float(np.mean(residual**2)))
        grad_w = 2.0 / m * xb.T @ residual
        grad_b = 2.0 / m * residual.sum(axis=0)
        grad_w = grad_w + proximal_strength * (w_local - w)
        grad_b = grad_b + proximal_strength * (b_local - b)
        w_local = w_local - client.learning_rate * grad_w
        b_local = b_local - client.learning_rate * grad_b
  return ClientRound(w - w_local, b - b_local, losses, n)


def client_weights(rounds, weighting: str):
  """Unnormalised p_i and whether the round fell back to num_examples."""
  sizes = np.array([r.num_examples for r in rounds], np.float64)
  reductions = np.array([r.loss_reduction for r in rounds], np.float64)
  valid = np.array([r.valid for r in rounds])
  formula = {
      'num_examples': sizes,
      'uniform': np.ones_like(sizes),
      'loss_reduction': reductions,
      'lorar': sizes * reductions,
  }[weighting]
  weights = np.where(valid, formula, 0.0)
  fell_back = weighting in ('loss_reduction', 'lorar') and weights.sum() == 0
  if fell_back:
    weights = np.where(valid, sizes, 0.0)
  return weights, fell_back


@dataclasses.dataclass
class ServerState:
  w: np.ndarray
  b: np.ndarray
  momentum_w: Optional[np.ndarray] = None
  momentum_b: Optional[np.ndarray] = None


def run_round(
    state: ServerState,
    clients,
    *,
    weighting: str,
    proximal_strength: float = 0.0,
    server_learning_rate: float = 1.0,
    server_momentum: float = 0.0,
):
  """One round of Algorithm 1. Returns (new state, per-client rounds, info)."""
  rounds = [train_client(state.w, state.b, c, proximal_strength) for c in clients]
  weights, fell_back = client_weights(rounds, weighting)
  total = weights.sum()
  info = dict(weights=weights, fell_back=fell_back)
  if total == 0:  # every client rejected: the model does not move
    return state, rounds, info
  avg_w = sum(p * np.nan_to_num(r.delta_w) for p, r in zip(weights, rounds)) / total
  avg_b = sum(p * np.nan_to_num(r.delta_b) for p, r in zip(weights, rounds)) / total
  if server_momentum:
    mw = avg_w if state.momentum_w is None else server_momentum * state.momentum_w + avg_w
    mb = avg_b if state.momentum_b is None else server_momentum * state.momentum_b + avg_b
    step_w, step_b = mw, mb
  else:
    mw = mb = None
    step_w, step_b = avg_w, avg_b
  new_state = ServerState(
      state.w - server_learning_rate * step_w,
      state.b - server_learning_rate * step_b,
      mw,
      mb,
  )
  return new_state, rounds, info
