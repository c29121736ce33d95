"""The (ε, δ) of a differentially private federated training, by `dp_accounting`.

A DP round (`tff.learning.dp_aggregator`, or any
`tff.aggregators.DifferentiallyPrivateFactory` with a Gaussian query) clips
every client's update to an L2 norm C and adds Gaussian noise of standard
deviation `noise_multiplier`·C to their sum. Over a run this module accounts
for user-level (client-level) privacy: neighbouring datasets differ by one
client's whole data (add or remove one client).

What is accounted: `rounds` Gaussian mechanisms, each on a cohort in which
every client of the `population` takes part independently with probability
q = `clients_per_round` / `population` (Poisson subsampling), composed.
With `clients_per_round == population` every client takes part in every
round and the round is the plain Gaussian mechanism (q = 1, no
amplification by sampling).

The accountant is Rényi DP (`dp_accounting.rdp.RdpAccountant`, Mironov
2017; the subsampled Gaussian of Mironov, Talwar and Zhang 2019), for three
reasons: it is what the DP-FedAvg papers and TFF's and TF Privacy's
tutorials report (McMahan et al., ICLR 2018), so our ε are comparable to
theirs; its cost does not grow with the number of rounds (RDP composes by
adding per-order values), so ε can be recorded every round; and it is a
valid upper bound on the privacy loss. The privacy loss distribution
accountant (`accountant='pld'`, `dp_accounting.pld.PLDAccountant`) gives a
tighter ε for the same run (8-15 % lower in the MNIST examples of the
tests) and is offered for comparison; runs record the RDP one.

Assumptions the number rests on, which the caller must make true or state:

*   clients are sampled uniformly from the population (Poisson with rate q;
    `tff_nlp.training.sample_clients` draws a fixed-size cohort uniformly
    without replacement, the usual stand-in, as in McMahan et al.);
*   the aggregate's sensitivity to one client is C/`clients_per_round`,
    i.e. clients are averaged with equal weights (`weighting='uniform'`):
    a data-dependent weight (Lorar's |D_i|·ΔL_i, or |D_i|) is not bounded
    by the clip and is not covered;
*   `noise_multiplier` is the effective one of the whole round, including the
    privacy spent on adaptive clipping (what `tff.learning.dp_aggregator`
    takes: it raises the noise on the updates to pay for it).

`epsilon` gives ε; `noise_multiplier_for_epsilon` inverts it;
`DpAccounting` holds one run's parameters and records them.
"""

import collections
import dataclasses
import math
from typing import Any

import dp_accounting

RDP = 'rdp'
PLD = 'pld'
ACCOUNTANTS = (RDP, PLD)
# The name runs record, with the accountant's class.
ACCOUNTANT_NAMES = {
    RDP: 'dp_accounting.rdp.RdpAccountant',
    PLD: 'dp_accounting.pld.PLDAccountant',
}
# The largest noise multiplier `noise_multiplier_for_epsilon` tries unless
# told otherwise; far more than any useful training tolerates.
DEFAULT_MAX_NOISE_MULTIPLIER = 1e3
# Below this the noise is no protection (ε in the hundreds or more); the
# search starts here.
MIN_NOISE_MULTIPLIER = 1e-2


def _is_int(value) -> bool:
  return isinstance(value, int) and not isinstance(value, bool)


def _check_run(clients_per_round: int, population: int, rounds: int,
               delta: float) -> None:
  """Raises ValueError naming the argument out of range."""
  if not _is_int(population) or population < 1:
    raise ValueError(
        f'population must be a positive integer, got {population!r}.')
  if not _is_int(clients_per_round) or not 1 <= clients_per_round <= (
      population):
    raise ValueError(
        'clients_per_round must be an integer from 1 to population='
        f'{population}, got {clients_per_round!r}.')
  if not _is_int(rounds) or rounds < 0:
    raise ValueError(
        f'rounds must be a non-negative integer, got {rounds!r}.')
  if not (isinstance(delta, (int, float)) and 0.0 < delta < 1.0):
    raise ValueError(f'delta must be in (0, 1), got {delta!r}.')


def dp_event(noise_multiplier: float, clients_per_round: int,
             population: int, rounds: int) -> dp_accounting.DpEvent:
  """The `dp_accounting.DpEvent` of `rounds` DP rounds.

  Args:
    noise_multiplier: Noise standard deviation over the clip norm.
    clients_per_round: Expected clients per round.
    population: Clients the cohorts are drawn from.
    rounds: DP rounds run.

  Returns:
    `rounds` self-composed Gaussian mechanisms, Poisson-subsampled with
    q = clients_per_round / population unless that is 1.
  """
  gaussian = dp_accounting.GaussianDpEvent(noise_multiplier)
  if clients_per_round < population:
    gaussian = dp_accounting.PoissonSampledDpEvent(
        clients_per_round / population, gaussian)
  return dp_accounting.SelfComposedDpEvent(gaussian, rounds)


def _accountant(accountant: str) -> dp_accounting.PrivacyAccountant:
  if accountant == RDP:
    return dp_accounting.rdp.RdpAccountant()
  if accountant == PLD:
    return dp_accounting.pld.PLDAccountant()
  raise ValueError(
      f'accountant must be one of {list(ACCOUNTANTS)}, got {accountant!r}.')


def epsilon(noise_multiplier: float, clients_per_round: int, population: int,
            rounds: int, delta: float, *, accountant: str = RDP) -> float:
  """The ε of `rounds` DP rounds at `delta` (see the module docstring).

  Args:
    noise_multiplier: Noise standard deviation over the clip norm, >= 0
      (0: no noise, ε = inf).
    clients_per_round: Expected clients per round, 1 to `population`.
    population: Clients the cohorts are drawn from.
    rounds: DP rounds run (0: ε = 0).
    delta: The δ of the guarantee, in (0, 1).
    accountant: 'rdp' (the default, what runs record) or 'pld'.

  Returns:
    ε, a float (inf without noise).

  Raises:
    ValueError: An argument out of range (named).
  """
  if not (isinstance(noise_multiplier, (int, float))
          and noise_multiplier >= 0 and math.isfinite(noise_multiplier)):
    raise ValueError('noise_multiplier must be a finite number >= 0, got '
                     f'{noise_multiplier!r}.')
  _check_run(clients_per_round, population, rounds, delta)
  ledger = _accountant(accountant)
  if rounds == 0:
    return 0.0
  if noise_multiplier == 0:
    return math.inf
  ledger.compose(dp_event(float(noise_multiplier), clients_per_round,
                          population, rounds))
  return float(ledger.get_epsilon(delta))


def noise_multiplier_for_epsilon(
    target_epsilon: float, clients_per_round: int, population: int,
    rounds: int, delta: float, *,
    max_noise_multiplier: float = DEFAULT_MAX_NOISE_MULTIPLIER,
    accountant: str = RDP) -> float:
  """The smallest noise multiplier whose `epsilon` is at most the target.

  ε falls monotonically as the noise multiplier grows, so the root of
  ε(σ) = target is bracketed in [`MIN_NOISE_MULTIPLIER`,
  `max_noise_multiplier`] and found by `dp_accounting.calibrate_dp_mechanism`
  (Brent's method, the library's calibration), to 1e-6; the result is
  never below the target's noise (ε(result) <= target_epsilon).

  Args:
    target_epsilon: The ε to reach, > 0.
    clients_per_round: Expected clients per round, 1 to `population`.
    population: Clients the cohorts are drawn from.
    rounds: DP rounds of the run, >= 1.
    delta: The δ of the guarantee, in (0, 1).
    max_noise_multiplier: The largest acceptable noise multiplier (e.g. the
      most `tff.learning.dp_aggregator`'s adaptive clipping allows,
      `dp_aggregator_max_noise_multiplier`).
    accountant: 'rdp' or 'pld'.

  Returns:
    The noise multiplier; `MIN_NOISE_MULTIPLIER` if even that reaches the
    target.

  Raises:
    ValueError: An argument out of range (named), or a target that
      `max_noise_multiplier` does not reach (the message gives the ε it
      reaches).
  """
  if not (isinstance(target_epsilon, (int, float)) and target_epsilon > 0
          and math.isfinite(target_epsilon)):
    raise ValueError(
        f'target_epsilon must be a finite number > 0, got {target_epsilon!r}.')
  _check_run(clients_per_round, population, rounds, delta)
  if rounds < 1:
    raise ValueError(f'rounds must be >= 1 to calibrate noise, got {rounds}.')
  if not max_noise_multiplier > MIN_NOISE_MULTIPLIER:
    raise ValueError(f'max_noise_multiplier must be > {MIN_NOISE_MULTIPLIER}'
                     f', got {max_noise_multiplier!r}.')

  def epsilon_of(sigma):
    return epsilon(sigma, clients_per_round, population, rounds, delta,
                   accountant=accountant)

  reached = epsilon_of(max_noise_multiplier)
  if reached > target_epsilon:
    raise ValueError(
        f'target_epsilon={target_epsilon} is not reachable: even '
        f'noise_multiplier={max_noise_multiplier:g} gives epsilon='
        f'{reached:.4g} for delta={delta:g}, {rounds} rounds of '
        f'{clients_per_round} of {population} clients; allow fewer rounds, a '
        'larger population, a larger delta or a larger target.')
  if epsilon_of(MIN_NOISE_MULTIPLIER) <= target_epsilon:
    return MIN_NOISE_MULTIPLIER
  return float(dp_accounting.calibrate_dp_mechanism(
      lambda: _accountant(accountant),
      lambda sigma: dp_event(sigma, clients_per_round, population, rounds),
      target_epsilon, delta,
      bracket_interval=dp_accounting.ExplicitBracketInterval(
          MIN_NOISE_MULTIPLIER, max_noise_multiplier)))


@dataclasses.dataclass(frozen=True)
class DpAccounting:
  """One DP run's accounting: everything its ε depends on but the rounds.

  Attributes:
    noise_multiplier: The effective noise multiplier of every round.
    clients_per_round: Expected clients per round.
    population: Clients the cohorts are drawn from.
    delta: The δ of the reported guarantee.
    target_epsilon: The ε the noise multiplier was calibrated for, if it was
      (`noise_multiplier_for_epsilon` for `target_rounds`).
    target_rounds: The rounds of that calibration.
    accountant: 'rdp' or 'pld'.
  """

  noise_multiplier: float
  clients_per_round: int
  population: int
  delta: float
  target_epsilon: float | None = None
  target_rounds: int | None = None
  accountant: str = RDP

  def __post_init__(self):
    # Fails here, naming the argument, rather than at the first round.
    epsilon(self.noise_multiplier, self.clients_per_round, self.population,
            0, self.delta, accountant=self.accountant)

  def epsilon(self, rounds: int) -> float:
    """ε after `rounds` DP rounds."""
    return epsilon(self.noise_multiplier, self.clients_per_round,
                   self.population, rounds, self.delta,
                   accountant=self.accountant)

  def round_metrics(self, rounds: int) -> dict[str, Any]:
    """A round's record entry (`training.run_training`'s round_metrics_fn).

    Args:
      rounds: The rounds run so far.

    Returns:
      `{'privacy': {'epsilon': ε after `rounds` rounds}}`.
    """
    return {'privacy': {'epsilon': self.epsilon(rounds)}}

  def to_json(self, rounds: int) -> dict[str, Any]:
    """What a run records: ε after `rounds` rounds and what it rests on."""
    record = collections.OrderedDict(
        epsilon=self.epsilon(rounds),
        delta=self.delta,
        noise_multiplier=self.noise_multiplier,
        clients_per_round=self.clients_per_round,
        population=self.population,
        rounds=rounds,
        sampling='poisson' if self.clients_per_round < self.population
        else 'full_participation',
        accountant=ACCOUNTANT_NAMES[self.accountant],
    )
    if self.target_epsilon is not None:
      record['target_epsilon'] = self.target_epsilon
      record['target_rounds'] = self.target_rounds
    return record
