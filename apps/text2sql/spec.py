"""What defines one text-to-SQL run: `Text2SqlSpec`.

`experiment.run_text2sql(spec, data_dir=..., output_dir=...)` trains and
evaluates the run a spec describes; where it reads and writes, and whether
it reuses learning processes or restarts, are that call's arguments, not the
spec's. A spec refuses options that do not fit together when it is built
(`Text2SqlSpec.__post_init__`); `model_aggregator` refuses an `aggregation`
that does not fit the run.
"""

import collections
import dataclasses
import os
from typing import Optional

from tff_nlp import errors
from tff_nlp import training as training_lib
from tff_nlp.aggregators import factory as aggregation_lib
from tff_nlp.models import lora as lora_lib
from tff_nlp.models import seq2seq
from apps.text2sql import task as text2sql_task
from apps.text2sql import template_parser as text2sql_templates


@dataclasses.dataclass(frozen=True)
class Text2SqlSpec:
  """One method of the paper's Table 2, with its options.

  Attributes:
    data: Data and tokenization.
    model: The parser. A `seq2seq.Seq2SeqConfig`: the seq2seq model; its
      `vocabulary_size` is replaced by the tokenizer's and its maximum
      lengths by `data`'s. A `text2sql_templates.TemplateParserConfig`: the
      template classifier (`data`'s `with_values`, tokenizer, merges and
      lengths do not apply to it; `retrieved_sql` and `init_from` are
      refused), whose records' token loss and accuracy are those of the
      gold template.
    training: Paradigm, algorithm, weighting and local training.
    loop: Rounds (epochs outside federated runs), evaluation cadence,
      checkpoints, seed.
    init_from: The output directory of an earlier centralized or federated
      run: its tokenizer and selected model (`best_checkpoint/`) are the
      starting point (e.g. pre-train centrally, then fine-tune federatedly).
      `model` and `data`'s maximum lengths must be that run's, except for
      `INIT_FROM_FREE_FIELDS`; the data may otherwise differ.
    vocab_slice_keys: If > 0, train with vocabulary-sliced FedAvg
      (`vocab_sliced`): each client downloads and uploads only
      the token-embedding rows of its `vocab_slice_keys` most frequent ids.
      Needs the federated paradigm, 'fedavg' and 'uniform' weighting.
    num_examples_fallback: See `algorithms.build_fl_process`. False gives
      Lorar rounds a single aggregation stage, so that they are split across
      several TFF workers (`tff_nlp.runtime.multi_worker`).
    aggregation: How the federated paradigm aggregates client updates
      (`aggregators.factory`: weight cap, robust aggregation, DP with
      ε); None or the default (stored as None): the weighted mean. DP needs
      'uniform' weighting; not for `vocab_slice_keys` or the other
      paradigms.
    lora: If set, fine-tune the seq2seq parser with these LoRA adapters
      (`algorithms.build_lora_process`: clients train and send only the
      adapters) from `init_from`'s model (or, without `init_from`, from the
      freshly initialised one). The selected checkpoint has the adapters
      merged. `results.json` then records the adapter and model sizes
      under `lora` (the frozen model reaches each client once, with the
      computation; the rounds' bytes count the adapters only).
    init_from_keras_nlp: A local keras-nlp BART preset directory
      (`models.keras_nlp_preset`; read offline): its tokenizer replaces the
      subword one and its model (architecture and weights) is the
      starting point, fully or, with `lora`, as the frozen base. `model`
      then gives only the seed; `data`'s maximum lengths must fit the
      preset. Not with `init_from`.
    tokenizer_from: The output directory of an earlier run (e.g. a
      `pretrain_seq2seq` run) whose tokenizer this run uses instead of
      training its own; the model starts from fresh weights. With the
      `init_from` run's tokenizer, a model from scratch differs from one
      fine-tuned from that run only in its starting weights. Not with
      `init_from` or `init_from_keras_nlp`, which bring their tokenizers.

  Raises (when built):
    InputError: Options that do not fit together.
    ValueError: `vocab_slice_keys` outside federated FedAvg with uniform
      weighting.
  """

  data: text2sql_task.DataConfig
  model: seq2seq.Seq2SeqConfig | text2sql_templates.TemplateParserConfig
  training: text2sql_task.TrainingConfig
  loop: training_lib.LoopConfig
  init_from: Optional[str] = None
  vocab_slice_keys: int = 0
  num_examples_fallback: bool = True
  aggregation: Optional[aggregation_lib.AggregationConfig] = None
  lora: Optional[lora_lib.LoraConfig] = None
  init_from_keras_nlp: Optional[str] = None
  tokenizer_from: Optional[str] = None

  def __post_init__(self):
    if self.aggregation is not None and self.aggregation.is_default:
      object.__setattr__(self, 'aggregation', None)
    self._check_options()

  @property
  def templates(self) -> bool:
    """Whether the parser is the template classifier."""
    return isinstance(self.model, text2sql_templates.TemplateParserConfig)

  def _check_options(self) -> None:
    """Refuses options that do not fit together."""
    data, training, templates = self.data, self.training, self.templates
    if templates and (self.init_from or self.vocab_slice_keys
                      or data.retrieved_sql or data.sql_merges or self.lora
                      or data.lowercase_sql):
      raise errors.InputError(
          'The template parser (--parser=template) takes no --init_from, '
          '--vocab_slice_keys, --retrieved_sql, --sql_merges, --lora_rank or '
          '--lowercase_sql: they are the seq2seq parser\'s.')
    if self.tokenizer_from and (self.init_from or self.init_from_keras_nlp
                                or templates):
      raise errors.InputError(
          '--tokenizer_from gives a model from scratch another run\'s '
          'tokenizer: it takes no --init_from or --init_from_keras_nlp (they '
          'bring their own tokenizers) and no --parser=template.')
    if self.init_from_keras_nlp and (
        self.init_from or templates or self.vocab_slice_keys
        or data.tokenizer == 'copy_words'):
      raise errors.InputError(
          '--init_from_keras_nlp starts from a keras-nlp preset (its model '
          'and tokenizer): it takes no --init_from, --parser=template, '
          '--vocab_slice_keys or --tokenizer=copy_words.')
    if self.lora and self.vocab_slice_keys:
      raise errors.InputError(
          '--lora_rank and --vocab_slice_keys are two ways of sending part '
          'of the model; use one.')
    if self.vocab_slice_keys and (
        training.paradigm, training.algorithm,
        training.weighting) != ('federated', 'fedavg', 'uniform'):
      raise ValueError(
          'vocab_slice_keys needs the federated paradigm with algorithm '
          "'fedavg' and weighting 'uniform' (the sliced embedding is "
          f'averaged uniformly), got {training.method}.')
    if self.aggregation is not None and (training.paradigm != 'federated'
                                         or self.vocab_slice_keys):
      raise errors.InputError(
          'The aggregation options (--max_weight_share, --robust_aggregation,'
          ' --dp_noise_multiplier, --target_epsilon) apply to the federated '
          'paradigm without --vocab_slice_keys, got '
          + (f'--vocab_slice_keys={self.vocab_slice_keys}.'
             if self.vocab_slice_keys
             else f'--paradigm={training.paradigm}.'))

  def model_aggregator(self, num_clients: Optional[int] = None):
    """The federated run's model aggregator and DP accounting.

    Args:
      num_clients: The clients of the run; None: `data`'s.

    Returns:
      (aggregator, accounting), or (None, None) without `aggregation`.

    Raises:
      InputError: An `aggregation` that does not fit the run.
    """
    if self.aggregation is None:
      return None, None
    if num_clients is None:
      num_clients = len(self.data.clients)
    return aggregation_lib.build_model_aggregator(
        self.aggregation, weighting=self.training.weighting,
        # More than the clients is refused by the loop, in its words.
        clients_per_round=min(self.loop.clients_per_round, num_clients),
        population=num_clients, rounds=self.loop.rounds)

  def experiment(self) -> collections.OrderedDict:
    """The `experiment` of the run's config: what a resumed run must match.

    An option enters only when set, so that the configurations of earlier
    runs without it (and the benchmark's cache keys) stay as they were.
    """
    experiment = collections.OrderedDict(
        seed=self.loop.seed, data=self.data, model=self.model,
        training=self.training,
        init_from=self.init_from and os.path.abspath(self.init_from))
    if self.vocab_slice_keys:
      experiment['vocab_slice_keys'] = self.vocab_slice_keys
    if not self.num_examples_fallback:
      experiment['num_examples_fallback'] = False
    if self.lora is not None:
      experiment['lora'] = self.lora
    if self.init_from_keras_nlp:
      experiment['init_from_keras_nlp'] = os.path.abspath(
          self.init_from_keras_nlp)
    if self.tokenizer_from:
      experiment['tokenizer_from'] = os.path.abspath(self.tokenizer_from)
    if self.aggregation is not None:
      experiment['aggregation'] = self.aggregation
    return experiment
