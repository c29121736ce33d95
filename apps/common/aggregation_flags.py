"""Flags of the model aggregation: weight cap, robust aggregation, DP with ε.

One set of flags for `tff_nlp.aggregators.factory.AggregationConfig`,
defined once here (`config_flags`) and adopted by every binary that trains
with `build_fl_process` (`weighting_demo`, `train_text2sql`,
`text2sql_benchmark`). Unset, they give today's weighted mean. Not a binary.
"""

from absl import app

from tff_nlp.aggregators import factory as aggregation
from apps.common import config_flags

AGGREGATION = config_flags.define_config(
    aggregation.AggregationConfig,
    names={'robust': 'robust_aggregation'},
    specs={
        'max_weight_share': config_flags.Spec(
            'If set, no client\'s share of a round\'s weight exceeds this '
            '(in (0, 1]; the excess goes to the others in proportion to '
            'their weights); e.g. 2/clients per round. Unset: no cap.',
            lower_bound=0.0, upper_bound=1.0),
        'robust_aggregation': config_flags.Spec(
            'Aggregate with tff.learning.robust_aggregator (adaptive zeroing '
            'and L2 clipping of client updates) instead of the plain '
            'weighted mean.'),
        'dp_noise_multiplier': config_flags.Spec(
            'If set, differential privacy (tff.learning.dp_aggregator: '
            'adaptive clipping, Gaussian noise of this multiple of the clip '
            'norm); needs uniform weighting. The run records its epsilon.',
            lower_bound=0.0),
        'target_epsilon': config_flags.Spec(
            'If set, differential privacy with the least noise whose epsilon '
            'after --rounds is at most this (for --dp_delta, the clients per '
            'round and the number of clients); needs uniform weighting.',
            lower_bound=0.0),
        'dp_delta': config_flags.Spec(
            'The delta of the recorded (epsilon, delta). Unset: 1 / number '
            'of clients.', lower_bound=0.0, upper_bound=1.0),
        'trim_fraction': config_flags.Spec(
            'If set, aggregate with the coordinate-wise trimmed weighted mean '
            '(in [0, 0.5): the fraction of clients dropped from each end of '
            'every coordinate; e.g. 0.125 drops one of eight). Not with '
            '--robust_aggregation or DP.', lower_bound=0.0, upper_bound=0.5),
        'dp_clip': config_flags.Spec(
            'With DP: clip every update to this L2 norm instead of adaptive '
            'clipping (which needs a noise multiplier below 0.1 x clients '
            'per round).', lower_bound=0.0),
    })


def aggregation_config() -> aggregation.AggregationConfig:
  """The `AggregationConfig` of the flags; a bad combination is a UsageError.

  Raises:
    app.UsageError: Flags that do not make a configuration (e.g. both
      --dp_noise_multiplier and --target_epsilon), in one line.
  """
  try:
    return AGGREGATION.build()
  except ValueError as e:
    raise app.UsageError(_as_flags(str(e))) from None


def _as_flags(message: str) -> str:
  """The message with the config's field names written as its flags."""
  for field, holder in AGGREGATION.holders.items():
    message = message.replace(f'{field}=', f'--{holder.name}=')
  return message
