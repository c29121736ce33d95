"""Template retrieval: a text-to-SQL baseline that learns nothing.

For each test question of a client, take the most similar training question
of the same client, take that training example's SQL template and fill in
the test question's own variable values (issue 22's no-learning baseline).
Precisely:

- Questions are the anonymised upstream text (`Sentence.text`, variable
  names such as `city_name0` kept), lower-cased and split on whitespace
  (`tokenize`). Only the client's *training* questions are retrieved from
  (`Text2SqlClientData.train`); dev and test questions never are.
- Similarity is the cosine of TF-IDF vectors (`Tfidf`), computed here in
  numpy with scikit-learn's `TfidfVectorizer` defaults: raw term counts
  times the smoothed idf `ln((1 + n) / (1 + df)) + 1` (n training
  questions, df of them containing the word), each row l2-normalised. The
  vocabulary and idf come from the training questions; a word seen only in
  a test question is ignored.
- Ties: the lowest training index (file order of `Text2SqlClientData.train`)
  among the questions within `TIE_TOLERANCE` of the best cosine, so equal
  scores that differ only by floating-point rounding are ties too. A question
  without any training word has cosine 0 with every training question and
  so gets training example 0.
- The template is the retrieved training query's anonymised canonical SQL
  (`Query.canonical_sql`). Its variables are filled by
  `tff_nlp.data.text2sql.fill_template` with the retrieved training example
  and the test sentence. By default (`values='stated'`, the headline
  protocol) a variable gets the test question's value only if the question
  states it (its name is in the question's text), else the retrieved
  training example's own value; `values='annotated'` (the "oracle
  entities" setting, and this module's only filling before issue 65) takes
  every annotated value of the test question, stated or not, then the
  retrieved query's example value. A name with no value stays.
- The prediction is scored like a parser's: exact match against the gold
  SQL with values (`tff_nlp.metrics.text2sql.exact_match`), and execution
  accuracy where the client has a database (`metrics.text2sql.evaluate`).

On the paper's full test splits (`tff_nlp.data.text2sql.PAPER_FOLDS`), with
annotated values, this gives exact match advising 447/573, atis 207/447,
geography 137/279, restaurants 72/74, scholar 115/218, academic 3/38, imdb
6/26, yelp 5/24: MacroAvg 46.9, MicroAvg 59.1
(`tests/apps/text2sql/template_retrieval_test.py`); with
stated values (the headline) see that test too. Issue 22 reports 47.3 /
58.6 (advising 446, atis 200, geography 144, restaurants 73, scholar 106,
academic 2, imdb 8, yelp 5 correct) for a description that leaves the
tokenizer, the tie rule and the retrieval pool open; no variant tried
(scikit-learn's token pattern, idf fit on train and test, highest index on
ties, questions with values, train and dev as the pool, bigrams, other idf
weightings) gives those counts exactly, and all of them stay within about
one point of MacroAvg 47.

Everything the baseline needs comes from the upstream files: the
`Text2SqlClientData` (from `load_clients`) gives each split's examples, whose
`query_index` and `sentence_index` point into
`tff_nlp.data.text2sql.read_client_queries`, which has the anonymised
question, the variables and the templates.
"""

from collections.abc import Mapping, Sequence
import dataclasses
from typing import Any, Optional

import numpy as np

from tff_nlp import errors
from tff_nlp.data import text2sql
from tff_nlp.data import text2sql_source
from tff_nlp.metrics import sql_execution
from tff_nlp.metrics import text2sql as text2sql_metrics

# Cosines within this of the best count as ties (broken by the lowest
# training index). Cosines are in [0, 1] and computed in float64, so
# rounding differences are ~1e-16; distinct questions differ far more.
TIE_TOLERANCE = 1e-12
# The splits that can be predicted: retrieving a training question from
# the training split would find the question itself.
EVALUATION_SPLITS = ('dev', 'test')

# (query, sentence): one question and the query it asks.
QueryAndSentence = tuple[text2sql.Query, text2sql.Sentence]


def tokenize(text: str) -> list[str]:
  """The words of a question: lower-cased, split on whitespace."""
  return text.lower().split()


@dataclasses.dataclass(frozen=True)
class Tfidf:
  """TF-IDF vectors, as scikit-learn's `TfidfVectorizer` defaults make them.

  Attributes:
    vocabulary: Word -> column, words in sorted order.
    idf: [V] float64, the smoothed idf `ln((1 + n) / (1 + df)) + 1` of each
      word, n the number of fitted documents and df how many contain it.
  """

  vocabulary: Mapping[str, int]
  idf: np.ndarray

  @classmethod
  def fit(cls, documents: Sequence[Sequence[str]]) -> 'Tfidf':
    """The vocabulary and idf of `documents` (each a list of words)."""
    vocabulary = {word: i for i, word in enumerate(
        sorted({word for document in documents for word in document}))}
    df = np.zeros(len(vocabulary))
    for document in documents:
      df[[vocabulary[word] for word in set(document)]] += 1
    n = len(documents)
    return cls(vocabulary=vocabulary, idf=np.log((1 + n) / (1 + df)) + 1)

  def transform(self, documents: Sequence[Sequence[str]]) -> np.ndarray:
    """[len(documents), V] rows of count * idf, each l2-normalised.

    Words outside the vocabulary are ignored; a document with none of its
    words in the vocabulary is a row of zeros.

    Args:
      documents: Each a list of words.

    Returns:
      The float64 matrix.
    """
    counts = np.zeros((len(documents), len(self.vocabulary)))
    for row, document in enumerate(documents):
      for word in document:
        column = self.vocabulary.get(word)
        if column is not None:
          counts[row, column] += 1
    weights = counts * self.idf
    norms = np.linalg.norm(weights, axis=1, keepdims=True)
    return weights / np.where(norms > 0, norms, 1)


def nearest_indices(similarities: np.ndarray,
                    tolerance: float = TIE_TOLERANCE) -> np.ndarray:
  """Per row, the lowest column within `tolerance` of the row's maximum.

  Args:
    similarities: [M, N] with N >= 1.
    tolerance: Scores this close to the best are ties.

  Returns:
    [M] int64 column indices.
  """
  best = similarities.max(axis=1, keepdims=True)
  # argmax of a boolean array: the first True.
  return np.argmax(similarities >= best - tolerance, axis=1)


class TemplateRetrieval:
  """Predicts SQL by the nearest training question's template.

  See the module docstring for the definition. Build with `fit`.
  """

  def __init__(self, tfidf: Tfidf, train_vectors: np.ndarray,
               train: Sequence[QueryAndSentence]):
    """Use `fit`: `train_vectors` are `tfidf`'s rows of `train`."""
    self._tfidf = tfidf
    self._train_vectors = train_vectors
    self._train = tuple(train)

  @classmethod
  def fit(cls, train: Sequence[QueryAndSentence]) -> 'TemplateRetrieval':
    """Indexes a client's training questions.

    Args:
      train: The training examples as (query, sentence), e.g. from
        `client_questions(..., 'train')`; at least one.

    Returns:
      The retrieval model.

    Raises:
      ValueError: If `train` is empty.
    """
    if not train:
      raise ValueError('Template retrieval needs at least one training '
                       'question.')
    documents = [tokenize(sentence.text) for _, sentence in train]
    tfidf = Tfidf.fit(documents)
    return cls(tfidf, tfidf.transform(documents), train)

  @property
  def train(self) -> tuple[QueryAndSentence, ...]:
    """The training examples, in the order `nearest` indexes them."""
    return self._train

  def similarities(self, sentences: Sequence[text2sql.Sentence]
                   ) -> np.ndarray:
    """[len(sentences), len(train)] TF-IDF cosines of the questions."""
    vectors = self._tfidf.transform([tokenize(s.text) for s in sentences])
    return vectors @ self._train_vectors.T

  def nearest(self, sentences: Sequence[text2sql.Sentence], *,
              leave_one_out: bool = False) -> np.ndarray:
    """[len(sentences)] index of each one's retrieved training example.

    Args:
      sentences: The questions.
      leave_one_out: `sentences` are the training questions themselves, in
        `train` order, and each is retrieved from the others (its own row
        never wins); needs at least two training examples.

    Returns:
      The int64 indices into `train`.

    Raises:
      ValueError: If `leave_one_out` and `sentences` is not `train`'s
        length or `train` has one example.
    """
    if not sentences:
      return np.zeros([0], np.int64)
    similarities = self.similarities(sentences)
    if leave_one_out:
      if len(sentences) != len(self._train) or len(self._train) < 2:
        raise ValueError(
            'Leave-one-out retrieval needs the training questions '
            f'themselves and at least two of them; got {len(sentences)} '
            f'questions for {len(self._train)} training examples.')
      np.fill_diagonal(similarities, -np.inf)
    return nearest_indices(similarities)

  def predict(self, sentences: Sequence[text2sql.Sentence], *,
              with_values: bool = True,
              leave_one_out: bool = False,
              values: str = text2sql.STATED) -> list[str]:
    """The predicted SQL of each question.

    Args:
      sentences: The questions (anonymised `text` and their `variables`).
      with_values: Fill the variables (the paper's protocol); False gives
        the retrieved query's anonymised canonical SQL.
      leave_one_out: See `nearest`.
      values: Which values fill the template (`text2sql.fill_template`):
        'stated' or 'annotated'.

    Returns:
      For each, the retrieved query's canonical SQL, with values as
      `values` says.
    """
    indices = self.nearest(sentences, leave_one_out=leave_one_out)
    if not with_values:
      return [self._train[index][0].canonical_sql for index in indices]
    return [text2sql.fill_template(self._train[index], sentence, values)
            for index, sentence in zip(indices, sentences)]


def retrieved_sql(train: Sequence[QueryAndSentence],
                  questions: Optional[Sequence[QueryAndSentence]] = None, *,
                  with_values: bool = True,
                  values: str = text2sql.STATED) -> list[str]:
  """The SQL retrieval predicts for each question: a parser's hint.

  A retrieve-and-edit parser (`tasks.text2sql.DataConfig.
  retrieved_sql`) reads this after the question. In training each
  question's hint comes from the *other* training questions (leave one
  out), as a test question's comes from training questions that are not
  itself; only the client's own training data is read, so federated
  clients retrieve locally.

  Args:
    train: The client's training (query, sentence) pairs: the pool.
    questions: The questions to retrieve for; None: `train` itself, leave
      one out.
    with_values: See `TemplateRetrieval.predict`.
    values: See `TemplateRetrieval.predict`.

  Returns:
    One SQL string per question, in order.

  Raises:
    ValueError: If `train` is empty, or has one example and `questions` is
      None.
  """
  model = TemplateRetrieval.fit(train)
  if questions is None:
    return model.predict([s for _, s in train], with_values=with_values,
                         leave_one_out=True, values=values)
  return model.predict([s for _, s in questions], with_values=with_values,
                       values=values)


def client_questions(client: Any, queries: Sequence[text2sql.Query],
                     split: str) -> list[QueryAndSentence]:
  """The (query, sentence) of each example of one split, in order.

  Args:
    client: A `text2sql.Text2SqlClientData` (with or without values) or
      anything whose attribute `split` holds examples with `query_index`,
      `sentence_index` and `question`.
    queries: The client's `read_client_queries`.
    split: 'train', 'dev' or 'test'.

  Returns:
    The pairs.

  Raises:
    InputError: If an example's indices do not point to its question
      (the client was loaded from other files than `queries`).
  """
  return example_questions(getattr(client, split), queries, split)


def example_questions(examples: Sequence[text2sql.Example],
                      queries: Sequence[text2sql.Query],
                      split: str) -> list[QueryAndSentence]:
  """`client_questions` of a list of examples (e.g. a subset of a split)."""
  pairs = []
  for i, example in enumerate(examples):
    query = sentence = None
    if (0 <= example.query_index < len(queries) and
        0 <= example.sentence_index < len(
            queries[example.query_index].sentences)):
      query = queries[example.query_index]
      sentence = query.sentences[example.sentence_index]
    if sentence is None or example.question not in (
        ' '.join(sentence.text.split()),
        text2sql.fill_question(query, sentence)):
      raise errors.InputError(
          f'{split} example {i} ({example.question!r}): query '
          f'{example.query_index}, sentence {example.sentence_index} of the '
          'data folder asks another question; were the clients loaded from '
          'another folder?')
    pairs.append((query, sentence))
  return pairs


def predict_clients(
    clients: Mapping[str, Any],
    *,
    data_dir: Optional[str] = None,
    split: str = 'test',
    values: str = text2sql.STATED,
) -> dict[str, list[tuple[str, str]]]:
  """Each client's (prediction, gold) SQL pairs of one split, with values.

  Args:
    clients: Client name -> `text2sql.Text2SqlClientData`, from
      `load_clients` (any folds, with or without values).
    data_dir: The folder `clients` were loaded from (see
      `text2sql_source.find_text2sql_dir`); None finds it.
    split: 'test' or 'dev'.
    values: How predictions are filled: 'stated' (the headline protocol)
      or 'annotated' (oracle entities); see `TemplateRetrieval.predict`.

  Returns:
    Client name -> its pairs, in the order of the split's examples; the
    gold is `text2sql.fill_sql` of the example's own query.

  Raises:
    ValueError: If `split` is not 'dev' or 'test', or a client has no
      training examples.
    InputError: See `client_questions`; also if the data folder is missing
      or malformed.
  """
  if split not in EVALUATION_SPLITS:
    raise ValueError(f'split must be one of {EVALUATION_SPLITS}, got '
                     f'{split!r}.')
  folder = text2sql_source.find_text2sql_dir(data_dir)
  pairs = {}
  for name, client in clients.items():
    queries = text2sql.read_client_queries(folder, name)
    try:
      train = client_questions(client, queries, 'train')
      questions = client_questions(client, queries, split)
    except errors.InputError as e:
      raise errors.InputError(f'{folder}: client {name!r}: {e}') from None
    try:
      predictions = retrieved_sql(train, questions, values=values)
    except ValueError as e:
      raise ValueError(f'Client {name!r}: {e}') from None
    pairs[name] = [(prediction, text2sql.fill_sql(query, sentence))
                   for prediction, (query, sentence)
                   in zip(predictions, questions)]
  return pairs


def evaluate_clients(
    clients: Mapping[str, Any],
    *,
    data_dir: Optional[str] = None,
    split: str = 'test',
    db_paths: Optional[Mapping[str, str]] = None,
    values: str = text2sql.STATED,
) -> text2sql_metrics.Text2SqlEvaluation:
  """Exact match and execution accuracy of template retrieval.

  Args:
    clients: Client name -> `text2sql.Text2SqlClientData` (see
      `predict_clients`); each needs at least one example of `split`.
    data_dir: The folder `clients` were loaded from; None finds it.
    split: 'test' or 'dev'.
    db_paths: Client name -> SQLite database for execution accuracy; None
      takes `metrics.sql_execution.find_databases` of the data folder
      (geography, restaurants); {} skips execution.
    values: See `predict_clients`.

  Returns:
    The `Text2SqlEvaluation`: per-client correct/total exact match with
    MacroAvg/MicroAvg (`.exact_match`), the same for execution
    (`.execution`) and failing gold queries (`.gold_errors`);
    `.to_json()` gives them as a dict.

  Raises:
    ValueError, InputError: See `predict_clients` and
      `metrics.text2sql.evaluate`.
  """
  pairs = predict_clients(clients, data_dir=data_dir, split=split,
                          values=values)
  if db_paths is None:
    db_paths = sql_execution.find_databases(
        text2sql_source.find_text2sql_dir(data_dir))
  return text2sql_metrics.evaluate(pairs, db_paths=db_paths)
