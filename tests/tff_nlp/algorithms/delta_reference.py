"""A reference for processes that aggregate weights as deltas through a TFF
aggregator (`tff_nlp.aggregators.delta_aggregation`), for the tests of
dynamic pulling and FCL: the aggregator's own process run alone on deltas
computed here in numpy, and the server's rescaling (2) in numpy.
"""

import numpy as np
import tensorflow_federated as tff

# The clipping norm starts at this (small) value, so that it clips the first
# round's deltas, and moves towards their median norm after every round.
INITIAL_CLIPPING_NORM = 0.05


def adaptive_clipping_factory() -> tff.aggregators.WeightedAggregationFactory:
  """A stateful weighted aggregator: the weighted mean of the deltas clipped
  to an adaptive L2 norm (estimated median of the clients' norms)."""
  return tff.aggregators.clipping_factory(
      tff.aggregators.PrivateQuantileEstimationProcess.no_noise(
          initial_estimate=INITIAL_CLIPPING_NORM, target_quantile=0.5,
          learning_rate=1.0),
      tff.aggregators.MeanFactory())


def reference_round(process, state, global_value, trained, weights,
                    masks=None):
  """One round of delta aggregation, as the module docstring describes it.

  Args:
    process: The aggregator's `tff.templates.AggregationProcess`, created by
      the test from the factory (value type: a list of float32 tensors).
    state: Its state before the round.
    global_value: The global tensors g (a list of arrays).
    trained: Per client, its tensors w_k.
    weights: Per client, its weight n_k.
    masks: Per client, bools over the tensors (None: all sent).

  Returns:
    `(new global tensors (float64), the aggregator's output)`.
  """
  num_tensors = len(global_value)
  if masks is None:
    masks = [[True] * num_tensors for _ in trained]
  masks = [np.asarray(m, bool) & (n > 0) for m, n in zip(masks, weights)]
  deltas = [[np.where(m[t], g - w, 0.0).astype(np.float32)
             for t, (g, w) in enumerate(zip(global_value, values))]
            for values, m in zip(trained, masks)]
  output = process.next(state, deltas,
                        [np.float32(n) for n in weights])
  total = float(np.sum(weights))
  new = []
  for t, g in enumerate(global_value):
    tensor_weight = sum(n for n, m in zip(weights, masks) if m[t])
    g = np.asarray(g, np.float64)
    new.append(g - np.asarray(output.result[t], np.float64) * total
               / tensor_weight if tensor_weight > 0 else g)
  return new, output
