"""The model aggregator of a run: weight cap, robust aggregation, DP with ε.

`AggregationConfig` is what a binary's aggregation flags say;
`build_model_aggregator` turns it into the
`tff.aggregators.WeightedAggregationFactory` that `build_fl_process` takes as
`model_aggregator` and, for a DP run, the `analysis.privacy.DpAccounting`
whose ε the run records. Bad settings raise `tff_nlp.errors.InputError` (a
`ValueError`) naming them, so a binary reports them in one line. The pieces,
innermost first:

*   the mean: `tff.aggregators.MeanFactory()` (the default, today's numerics),
    or `tff.learning.robust_aggregator(zeroing=True, clipping=True,
    weighted=True)` (`robust`: adaptive zeroing of huge updates and adaptive
    L2 clipping, Andrew, Thakkar et al. 2021), or differential privacy:
    `tff.learning.dp_aggregator(noise_multiplier, clients_per_round)`
    (adaptive clipping to the median norm, Gaussian noise, zeroing; McMahan
    et al., ICLR 2018), or with `dp_clip` a fixed clip
    (`tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed`). The DP
    aggregators are unweighted means (their sensitivity bound assumes every
    client counts the same), wrapped with
    `tff.aggregators.as_weighted_aggregator`, which ignores the weights; so
    DP is built only for `weighting='uniform'`, where ignoring them changes
    nothing, and refused for the others;
    or `trimmed_mean.TrimmedMeanFactory(trim_fraction)` (`trim_fraction`:
    a coordinate-wise trimmed weighted mean, Yin et al., ICML 2018);
*   outermost, `weight_cap.WeightShareCapFactory(max_weight_share, inner)`:
    no client's share of the round's weight exceeds the cap.
"""

import dataclasses
from typing import Optional

import tensorflow_federated as tff

from tff_nlp import errors
from tff_nlp.aggregators import trimmed_mean
from tff_nlp.aggregators import weight_cap
from tff_nlp.aggregators import weighting as weighting_lib
from tff_nlp.analysis import privacy

# `tff.learning.dp_aggregator`'s adaptive clipping spends privacy on a noisy
# count of clipped clients with standard deviation 0.05·clients_per_round
# (TFF's default) and pays for it from the noise multiplier, which must stay
# below 2·0.05·clients_per_round (`adaptive_clip_noise_params` raises
# otherwise).
_ADAPTIVE_CLIP_MAX_NOISE_PER_CLIENT = 2 * 0.05


def dp_aggregator_max_noise_multiplier(clients_per_round: int) -> float:
  """The noise multiplier `tff.learning.dp_aggregator` stays below."""
  return _ADAPTIVE_CLIP_MAX_NOISE_PER_CLIENT * clients_per_round


def _positive_number(value) -> bool:
  return (isinstance(value, (int, float)) and not isinstance(value, bool)
          and value > 0)


@dataclasses.dataclass(frozen=True)
class AggregationConfig:
  """How a run aggregates the clients' model updates.

  Attributes:
    max_weight_share: If set, a cap c in (0, 1] on any client's share of a
      round's weight (`weight_cap`); e.g. `2 / clients_per_round`. None: the
      weighting's shares unchanged.
    robust: Aggregate with `tff.learning.robust_aggregator(zeroing=True,
      clipping=True, weighted=True)` instead of the plain weighted mean.
    dp_noise_multiplier: If set (> 0), differential privacy: the Gaussian
      noise's standard deviation over the clip norm (the effective one,
      adaptive clipping's share included). Needs `weighting='uniform'`.
    target_epsilon: If set (> 0), differential privacy with the smallest
      noise multiplier whose ε after the run's rounds is at most this
      (`privacy.noise_multiplier_for_epsilon`). Needs `weighting='uniform'`.
    dp_delta: The δ of the recorded (ε, δ), in (0, 1). None: 1 / population
      (the number of clients), the largest δ usually considered meaningful;
      a smaller one (e.g. 1 / population^1.1) gives a stronger statement.
    dp_clip: With DP: None clips adaptively (`tff.learning.dp_aggregator`,
      whose noise multiplier must stay below 0.1·clients_per_round); a
      number (> 0) clips every update to this L2 norm
      (`DifferentiallyPrivateFactory.gaussian_fixed`, no such bound).
    trim_fraction: If set, a β in [0, 0.5): aggregate with the
      coordinate-wise trimmed weighted mean
      (`trimmed_mean.TrimmedMeanFactory`), which drops the ⌊β·n⌋ largest and
      smallest client values of every coordinate. Not with `robust` or DP.
  """

  max_weight_share: Optional[float] = None
  robust: bool = False
  dp_noise_multiplier: Optional[float] = None
  target_epsilon: Optional[float] = None
  dp_delta: Optional[float] = None
  dp_clip: Optional[float] = None
  trim_fraction: Optional[float] = None

  def __post_init__(self):
    for check, value in ((weight_cap.check_max_share, self.max_weight_share),
                         (trimmed_mean.check_trim_fraction,
                          self.trim_fraction)):
      if value is not None:
        try:
          check(value)
        except ValueError as e:
          raise errors.InputError(str(e)) from None
    if self.trim_fraction is not None and (self.robust or self.dp):
      raise errors.InputError(
          'trim_fraction is a mean of its own: not with robust or '
          'differential privacy (choose one).')
    if not isinstance(self.robust, bool):
      raise errors.InputError(
          f'robust must be a bool, got {self.robust!r}.')
    for name in ('dp_noise_multiplier', 'target_epsilon', 'dp_clip'):
      value = getattr(self, name)
      if value is not None and not _positive_number(value):
        raise errors.InputError(
            f'{name} must be a number > 0, got {value!r}.')
    if self.dp_delta is not None and not (
        _positive_number(self.dp_delta) and self.dp_delta < 1):
      raise errors.InputError(
          f'dp_delta must be in (0, 1), got {self.dp_delta!r}.')
    if self.dp_noise_multiplier is not None and (
        self.target_epsilon is not None):
      raise errors.InputError(
          'dp_noise_multiplier and target_epsilon both set: give one (the '
          'noise multiplier, or the ε it is calibrated to).')
    if not self.dp:
      for name in ('dp_delta', 'dp_clip'):
        if getattr(self, name) is not None:
          raise errors.InputError(
              f'{name} is only used with differential privacy: set '
              'dp_noise_multiplier or target_epsilon too.')
    if self.dp and self.robust:
      raise errors.InputError(
          'robust=True with differential privacy: the DP aggregator already '
          'clips every update (and tff.learning.dp_aggregator zeroes huge '
          'ones); drop robust.')

  @property
  def dp(self) -> bool:
    """Whether the run is differentially private."""
    return (self.dp_noise_multiplier is not None
            or self.target_epsilon is not None)

  @property
  def is_default(self) -> bool:
    """Whether this is the plain weighted mean (every field at default)."""
    return self == AggregationConfig()


def _check_cohort(clients_per_round, population, rounds) -> int:
  """The clients per round (0: the population); InputError if bad."""
  for name, value, minimum in (('clients_per_round', clients_per_round, 0),
                               ('population', population, 1),
                               ('rounds', rounds, 1)):
    if (isinstance(value, bool) or not isinstance(value, int)
        or value < minimum):
      raise errors.InputError(
          f'{name} must be an integer >= {minimum}, got {value!r}.')
  if clients_per_round > population:
    raise errors.InputError(
        f'clients_per_round={clients_per_round} is more than '
        f'population={population}.')
  return clients_per_round or population


def dp_accounting_for(config: AggregationConfig, *, clients_per_round: int,
                      population: int, rounds: int
                      ) -> privacy.DpAccounting:
  """The accounting of a DP `config` (its noise multiplier calibrated).

  Args:
    config: An `AggregationConfig` with `dp`.
    clients_per_round: The run's clients per round; 0: every client (as
      `tff_nlp.training.sample_clients`).
    population: The clients the rounds sample from.
    rounds: The run's rounds (what `target_epsilon` is calibrated for).

  Returns:
    The `privacy.DpAccounting` of the run.

  Raises:
    InputError: A config without DP, an out-of-range argument, or a
      `target_epsilon` that the largest allowed noise does not reach.
  """
  if not config.dp:
    raise errors.InputError('config has no differential privacy: set '
                            'dp_noise_multiplier or target_epsilon.')
  clients_per_round = _check_cohort(clients_per_round, population, rounds)
  delta = 1.0 / population if config.dp_delta is None else config.dp_delta
  max_noise = (privacy.DEFAULT_MAX_NOISE_MULTIPLIER if config.dp_clip
               else dp_aggregator_max_noise_multiplier(clients_per_round))
  if config.target_epsilon is not None:
    try:
      noise_multiplier = privacy.noise_multiplier_for_epsilon(
          config.target_epsilon, clients_per_round, population, rounds,
          delta, max_noise_multiplier=min(
              max_noise * (1 - 1e-9), privacy.DEFAULT_MAX_NOISE_MULTIPLIER))
    except ValueError as e:
      hint = ('' if config.dp_clip else
              ' Adaptive clipping allows a noise multiplier below '
              f'{max_noise:g} with {clients_per_round} clients per round; a '
              'fixed dp_clip does not limit it.')
      raise errors.InputError(f'{e}{hint}') from None
  else:
    noise_multiplier = float(config.dp_noise_multiplier)
    if not config.dp_clip and noise_multiplier >= max_noise:
      raise errors.InputError(
          f'dp_noise_multiplier={noise_multiplier:g} is too large for '
          'tff.learning.dp_aggregator\'s adaptive clipping with '
          f'{clients_per_round} clients per round (it must be below '
          f'{max_noise:g}); use fewer noise, more clients per round, or a '
          'fixed dp_clip.')
  return privacy.DpAccounting(
      noise_multiplier=noise_multiplier,
      clients_per_round=clients_per_round,
      population=population,
      delta=delta,
      target_epsilon=config.target_epsilon,
      target_rounds=rounds if config.target_epsilon is not None else None)


def build_model_aggregator(
    config: AggregationConfig,
    *,
    weighting: str | weighting_lib.Weighting,
    clients_per_round: int,
    population: int,
    rounds: int,
) -> tuple[tff.aggregators.WeightedAggregationFactory,
           Optional[privacy.DpAccounting]]:
  """The model aggregator of `config` and, for DP, its accounting.

  The aggregator's processes, for client values V and float32 weights, have
  the type signature `(<S@SERVER, {V}@CLIENTS, {float32}@CLIENTS> ->
  <state=S@SERVER, result=V@SERVER, measurements=M@SERVER>)`, S and M those
  of the composition in the module docstring (with the cap: M =
  `<weight_cap=C, inner=M'>`).

  Args:
    config: The aggregation.
    weighting: The run's client weighting (DP needs 'uniform').
    clients_per_round: Clients per round, the DP aggregator's expected
      cohort and the accounting's; 0: every client (as
      `tff_nlp.training.sample_clients`).
    population: Number of clients the rounds sample from.
    rounds: The run's rounds (`target_epsilon` is reached after them).

  Returns:
    `(aggregator, accounting)`: a `tff.aggregators.WeightedAggregationFactory`
    (`tff.aggregators.MeanFactory()` for the default config) and the run's
    `privacy.DpAccounting`, None without DP.

  Raises:
    InputError: DP with a weighting other than 'uniform', an out-of-range
      argument, or an unreachable `target_epsilon` (each named).
  """
  try:
    weighting = weighting_lib.parse_option(
        weighting, weighting_lib.Weighting, 'weighting')
  except ValueError as e:
    raise errors.InputError(str(e)) from None
  clients_per_round = _check_cohort(clients_per_round, population, rounds)
  accounting = None
  if config.dp:
    if weighting is not weighting_lib.Weighting.UNIFORM:
      raise errors.InputError(
          f'Differential privacy (dp_noise_multiplier / target_epsilon) needs '
          f"weighting='uniform', got weighting={weighting.value!r}: the DP "
          "aggregator's sensitivity bound assumes every client has the same "
          'weight, and a data-dependent weight is not covered by the clip.')
    accounting = dp_accounting_for(
        config, clients_per_round=clients_per_round, population=population,
        rounds=rounds)
    if config.dp_clip is None:
      unweighted = tff.learning.dp_aggregator(
          accounting.noise_multiplier, clients_per_round)
    else:
      unweighted = (
          tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
              accounting.noise_multiplier, clients_per_round,
              config.dp_clip))
    aggregator = tff.aggregators.as_weighted_aggregator(unweighted)
  elif config.robust:
    aggregator = tff.learning.robust_aggregator(
        zeroing=True, clipping=True, weighted=True)
  elif config.trim_fraction is not None:
    aggregator = trimmed_mean.TrimmedMeanFactory(config.trim_fraction)
  else:
    aggregator = tff.aggregators.MeanFactory()
  if config.max_weight_share is not None:
    aggregator = weight_cap.WeightShareCapFactory(
        config.max_weight_share, inner=aggregator)
  return aggregator, accounting
