"""A template-classification text-to-SQL parser: learns, in minutes, on a CPU.

Finegan-Dollak et al. (ACL 2018, "Improving Text-to-SQL Evaluation
Methodology") give, beside their seq2seq models, a *template baseline*: a
classifier chooses one of the SQL templates seen in training, and the
question's variables fill its slots. On the question split, where a test
question's query usually has other questions in training, it is strong. Here
it is a parser of `experiments.text2sql.run_text2sql` (pass a
`TemplateParserConfig` as its `model`), trained by every paradigm (finetune,
centralized, FedAvg / FedOPT / FedProx with any weighting, Lorar included),
and it reaches the retrieval baseline's level and above, where the seq2seq
parser trained from scratch on 2 cores does not (`docs/results/text2sql.md`).

Precisely:

- Templates are the clients' training queries' anonymised canonical SQL
  (`text2sql.Query.canonical_sql`), one class per distinct (client,
  template), in client then file order. A class's *representative* is its
  first training example; a predicted class is turned into SQL with values
  as template retrieval does (`text2sql.fill_template` of the representative
  and the question, under `TemplateParserConfig.values`). A test question
  whose template no training question of its client has cannot be answered
  (the parser's ceiling, in `results.json`'s `template_coverage`).
- The model is `models.text_classifier` (fastText: mean of n-gram
  embeddings, then softmax) with `class_groups`: each class's group is its
  client, so a question is classified among its own database's templates
  only, in training and in prediction (the database is known: it is the
  paper's schema input). A client's update so never touches another
  database's template logits directly.
- Inputs are the anonymised question (`text2sql.Sentence.text`, variable
  names such as `city_name0` kept), lower-cased, split on whitespace, with
  `<s>`, `</s>` and every n-gram up to `ngrams` words as one feature
  (`features`). The vocabulary (`data.vocabulary`) is built from every
  client's training questions, as the seq2seq tokenizer is (a stand-in for
  an agreed public vocabulary); no input is truncated.

Information used: the anonymised question (its entity spans replaced by
variable names, as annotated) and, by default (`values='stated'`, the
headline protocol), only the values the question states: a variable whose
name is not in the question's text keeps the value of the training example
the template was learned from. `values='annotated'` fills every annotated
value, including values the question never states (ATIS "on monday" is
annotated day_number0 = 21, month_number0 = 2): Finegan-Dollak et al.'s
"oracle entities" setting, reported only under that name. The
template-retrieval baseline is given exactly the same. `DataConfig.
with_values` changes nothing here: both give the same predictions.

`template_metrics` gives the cross-entropy and accuracy of the gold class,
over the examples whose template has a class, under the seq2seq parser's
token metric names (`token_loss`, `token_accuracy`, `correct_tokens`,
`tokens`: one "token" per covered question), so that the records, reports
and summaries of both parsers read alike.
"""

import collections
from collections.abc import Callable, Mapping, Sequence
import dataclasses
from typing import Any, Optional

import numpy as np
import tensorflow as tf

from tff_nlp import errors
from apps.text2sql import template_retrieval
from tff_nlp.data import text2sql
from tff_nlp.data import text2sql_source
from tff_nlp.data import vocabulary as vocabulary_lib
from tff_nlp.models import text_classifier
from tff_nlp.training import release

# No class: a dev or test question whose template no training question of
# its client has. Never a training label.
NO_CLASS = -1
_NGRAM_JOINER = '\u2581'  # Joins an n-gram's words into one token.


@dataclasses.dataclass(frozen=True)
class TemplateParserConfig:
  """The template parser's model; the rest comes from the data.

  Attributes:
    embedding_dim: Size of the n-gram embeddings.
    ngrams: Longest word n-gram used as a feature (1: words only).
    seed: Seed of the initial weights.
    values: Where a predicted template's values come from
      (`text2sql.VALUE_SOURCES`): 'stated' (the headline protocol) or
      'annotated' (oracle entities). Runs recorded before the field existed
      filled annotated values, and keep their cache keys as such.
  """

  embedding_dim: int = 256
  ngrams: int = 2
  seed: int = 0
  values: str = release.field_added_later(text2sql.STATED,
                                          legacy=text2sql.ANNOTATED)

  def __post_init__(self):
    if self.embedding_dim < 1 or self.ngrams < 1:
      raise ValueError(
          f'embedding_dim and ngrams must be positive, got '
          f'{self.embedding_dim} and {self.ngrams}.')
    if self.values not in text2sql.VALUE_SOURCES:
      raise ValueError(f'values must be one of {text2sql.VALUE_SOURCES}, '
                       f'got {self.values!r}.')


def features(question: str, ngrams: int) -> list[str]:
  """The n-gram features of an anonymised question.

  E.g. `features('list flights', 2)` is `<s>`, `list`, `flights`, `</s>`
  and the bigrams `<s>▁list`, `list▁flights`, `flights▁</s>` (joined by
  U+2581, which `tokenize` never produces: it splits on whitespace only and
  questions do not hold it).
  """
  words = ['<s>'] + template_retrieval.tokenize(question) + ['</s>']
  result = list(words)
  for n in range(2, ngrams + 1):
    result += [_NGRAM_JOINER.join(words[i:i + n])
               for i in range(len(words) - n + 1)]
  return result


@dataclasses.dataclass
class TemplateInventory:
  """The classes: one per distinct (client, template) of the training data.

  Attributes:
    clients: The clients, in group order (a class's group is its client's
      index here).
    representatives: Each class's first training example (query,
      sentence).
    groups: Each class's client index.
  """

  clients: tuple[str, ...]
  representatives: list[template_retrieval.QueryAndSentence]
  groups: list[int]
  _ids: dict[tuple[str, str], int] = dataclasses.field(default_factory=dict)

  @classmethod
  def build(cls, train: Mapping[str, Sequence[template_retrieval.
                                              QueryAndSentence]]
            ) -> 'TemplateInventory':
    """Classes from each client's training (query, sentence) pairs."""
    inventory = cls(tuple(train), [], [])
    for group, (client, pairs) in enumerate(train.items()):
      for query, sentence in pairs:
        key = (client, query.canonical_sql)
        if key not in inventory._ids:
          inventory._ids[key] = len(inventory.representatives)
          inventory.representatives.append((query, sentence))
          inventory.groups.append(group)
    return inventory

  def __len__(self) -> int:
    return len(self.representatives)

  def class_of(self, client: str, query: text2sql.Query) -> int:
    """The class of `query`'s template for `client`, or `NO_CLASS`."""
    return self._ids.get((client, query.canonical_sql), NO_CLASS)

  def sql(self, class_id: int, sentence: text2sql.Sentence,
          values: str = text2sql.STATED) -> str:
    """The SQL with values of class `class_id` for the question `sentence`
    (`text2sql.fill_template` under `values`)."""
    return text2sql.fill_template(self.representatives[class_id], sentence,
                                  values)


@dataclasses.dataclass
class TemplateTokenizer:
  """What turns questions into model inputs and classes into SQL.

  Stands where `Text2SqlTask.tokenizer` holds the seq2seq tokenizer.
  """

  vocabulary: vocabulary_lib.Vocabulary
  inventory: TemplateInventory
  ngrams: int
  max_length: int
  values: str = text2sql.STATED

  def vocabulary_size(self) -> int:
    return self.vocabulary.size

  def sql(self, class_id: int, sentence: text2sql.Sentence) -> str:
    """The SQL of a predicted class, under this task's `values`."""
    return self.inventory.sql(class_id, sentence, self.values)

  def encode(self, client: str,
             pairs: Sequence[template_retrieval.QueryAndSentence]):
    """(x, y) of one client's questions: `text_classifier`'s grouped input."""
    ids = self.vocabulary.encode(
        [' '.join(features(s.text, self.ngrams)) for _, s in pairs],
        self.max_length)
    group = np.full([len(pairs)], self.inventory.clients.index(client),
                    np.int32)
    y = np.array([self.inventory.class_of(client, q) for q, _ in pairs],
                 np.int32)
    x = collections.OrderedDict([(text_classifier.TOKEN_IDS, ids),
                                 (text_classifier.GROUP, group)])
    return x, y


def load_questions(config, data_dir: Optional[str], subset: Callable
                   ) -> dict[str, dict[str, list[Any]]]:
  """Client -> split -> (query, sentence) pairs of `config`'s examples.

  `subset(examples, client, split)` applies `config`'s example limits
  (`tasks.text2sql._subset`).
  """
  folder = text2sql_source.find_text2sql_dir(data_dir)
  raw = text2sql.load_clients(config.clients, data_dir=data_dir,
                              with_values=config.with_values)
  questions = {}
  for name in config.clients:
    queries = text2sql.read_client_queries(folder, name)
    questions[name] = {}
    for split in text2sql.SPLITS:
      examples = subset(getattr(raw[name], split), name, split)
      if not examples:
        raise errors.InputError(
            f'{folder}: client {name!r} has no {split} examples.')
      try:
        questions[name][split] = template_retrieval.example_questions(
            examples, queries, split)
      except errors.InputError as e:
        raise errors.InputError(f'{folder}: client {name!r}: {e}') from None
  return questions


def build_tokenizer(questions, *, vocabulary_size: int, ngrams: int,
                    values: str = text2sql.STATED) -> TemplateTokenizer:
  """The vocabulary and classes of the training questions; no truncation.

  `values`: `TemplateParserConfig.values`, how predictions are filled.
  """
  inventory = TemplateInventory.build(
      {name: splits['train'] for name, splits in questions.items()})
  vocabulary = vocabulary_lib.Vocabulary.build(
      (' '.join(features(s.text, ngrams))
       for splits in questions.values() for _, s in splits['train']),
      vocabulary_size)
  max_length = max(len(features(s.text, ngrams))
                   for splits in questions.values()
                   for pairs in splits.values() for _, s in pairs)
  return TemplateTokenizer(vocabulary, inventory, ngrams, max_length, values)


def classifier_spec(config: TemplateParserConfig,
                    tokenizer: TemplateTokenizer
                    ) -> text_classifier.TextClassifierSpec:
  """The `text_classifier` spec of `config` on the task's data."""
  return text_classifier.TextClassifierSpec(
      vocab_size=tokenizer.vocabulary_size(),
      num_classes=len(tokenizer.inventory),
      max_length=tokenizer.max_length,
      embedding_dim=config.embedding_dim,
      seed=config.seed,
      class_groups=tuple(tokenizer.inventory.groups))


def coverage(y: np.ndarray) -> tuple[int, int]:
  """(questions whose template has a class, questions)."""
  return int(np.sum(y != NO_CLASS)), int(len(y))


def train_dataset(data, *, batch_size: int,
                  shuffle_seed: Sequence[int]) -> tf.data.Dataset:
  """One epoch of a split's examples in a seeded order, batched.

  Every training example has a class (`TemplateInventory.build` makes one
  for each), so none is dropped.
  """
  order = np.random.default_rng(list(shuffle_seed)).permutation(len(data.y))
  x = collections.OrderedDict((k, v[order]) for k, v in data.x.items())
  return tf.data.Dataset.from_tensor_slices((x, data.y[order])).batch(
      batch_size)


def predict_classes(keras_model: tf.keras.Model, x, *,
                    batch_size: int) -> np.ndarray:
  """The most probable class of each example, [N] int."""
  probabilities = keras_model.predict(dict(x), batch_size=batch_size,
                                      verbose=0)
  return np.argmax(probabilities, axis=1)


def template_metrics(keras_model: tf.keras.Model, data, *,
                     batch_size: int) -> dict[str, float]:
  """Gold-class cross-entropy and accuracy over the covered examples."""
  covered = data.y != NO_CLASS
  # Per example (as the seq2seq parser's `make_token_metrics_fn`): one
  # "token" per covered question, none for the others.
  example_tokens = covered.astype(int).tolist()
  if not covered.any():
    return {'token_loss': float('nan'), 'token_accuracy': 0.0,
            'correct_tokens': 0, 'tokens': 0,
            'example_correct_tokens': [0] * len(covered),
            'example_tokens': example_tokens}
  x = {k: v[covered] for k, v in data.x.items()}
  probabilities = keras_model.predict(x, batch_size=batch_size, verbose=0)
  gold = probabilities[np.arange(len(probabilities)), data.y[covered]]
  # Keras' cross-entropy on probabilities clips them to [1e-7, 1 - 1e-7].
  loss = -np.log(np.clip(gold, 1e-7, 1 - 1e-7))
  accuracy = np.argmax(probabilities, axis=1) == data.y[covered]
  return {'token_loss': float(np.mean(loss)),
          'token_accuracy': float(np.mean(accuracy)),
          # The seq2seq parser's token counts' names: here one "token" per
          # covered question.
          'correct_tokens': int(np.sum(accuracy)), 'tokens': int(len(loss)),
          'example_correct_tokens': _scatter(covered, accuracy),
          'example_tokens': example_tokens}


def _scatter(covered: np.ndarray, accuracy: np.ndarray) -> list[int]:
  """Each question's correct "tokens": its accuracy if covered, else 0."""
  example_correct = np.zeros(len(covered), int)
  example_correct[covered] = accuracy
  return example_correct.tolist()
