"""The clients' data of the federated text-to-SQL task, loaded and encoded.

`prepare_task` loads, subsets and tokenizes the clients' data for the
seq2seq parser (`tff_nlp.models.seq2seq`), `prepare_template_task` for the
template parser (`apps.text2sql.template_parser`), each as a
`task.Text2SqlTask`, from a `task.DataConfig` (which examples and how they
become token ids). `apps.text2sql.task` holds the configurations and the
task's types; this module reads the data.

The subword vocabulary is trained on the training text of every client, a
stand-in for the public pre-trained T5 vocabulary of the paper; the text
never enters a federated computation.
"""

import collections
import functools
from typing import Optional

import numpy as np

from tff_nlp import errors
from apps.text2sql import task as text2sql_task
from apps.text2sql import template_retrieval
from tff_nlp.data import text2sql
from tff_nlp.data import text2sql_source
from tff_nlp.metrics import sql_execution
from tff_nlp.metrics import text2sql as text2sql_metrics
from tff_nlp.models import copy_tokenizer
from tff_nlp.models import seq2seq
from tff_nlp.models import subword_tokenizer
from apps.common import seq2seq_examples
from apps.text2sql import template_parser as text2sql_templates


def _subset(examples, limit, seed, client, split):
  if not limit or len(examples) <= limit:
    return list(examples)
  rng = np.random.default_rng(
      [seed, text2sql.CLIENTS.index(client), text2sql.SPLITS.index(split)])
  return [examples[i] for i in sorted(rng.choice(len(examples), limit,
                                                 replace=False))]


def _encode(tokenizer, sources, gold_sql, config: text2sql_task.DataConfig) -> text2sql_task.EncodedSplit:
  encoded = seq2seq_examples.encode_pairs(
      tokenizer, sources, gold_sql, source_length=config.max_source_length,
      target_length=config.max_target_length)
  return text2sql_task.EncodedSplit(
      x=encoded.x, y=encoded.y, sources=list(sources),
      gold_sql=list(gold_sql), truncated_sources=encoded.truncated_sources,
      truncated_targets=encoded.truncated_targets)


def _encode_copy(tokenizer: copy_tokenizer.CopyTokenizer, sources, targets,
                 *, source_length: int, target_length: int) -> text2sql_task.EncodedSplit:
  """`seq2seq_inputs.pack_inputs`' layout with `copy_tokenizer` ids, in numpy."""
  n = len(sources)
  x_source = np.zeros([n, source_length], np.int32)
  x_target = np.zeros([n, target_length], np.int32)
  y = np.zeros([n, target_length], np.int32)
  truncated_sources = truncated_targets = 0
  for row, (source, target) in enumerate(zip(sources, targets)):
    source_ids = tokenizer.encode_source(source)
    target_ids = tokenizer.encode_target(target, source)
    if len(source_ids) + 1 > source_length:
      truncated_sources += 1
      source_ids = source_ids[:source_length - 1]
      # A copy id past the cut names nothing.
      limit = tokenizer.output_vocabulary_size() + len(source_ids)
      target_ids = [i if i < limit else copy_tokenizer.UNK_ID
                    for i in target_ids]
    if len(target_ids) + 1 > target_length:
      truncated_targets += 1
      target_ids = target_ids[:target_length - 1]
    x_source[row, :len(source_ids) + 1] = source_ids + [seq2seq.END_ID]
    x_target[row, :len(target_ids) + 1] = [seq2seq.START_ID] + target_ids
    y[row, :len(target_ids) + 1] = target_ids + [seq2seq.END_ID]
  return text2sql_task.EncodedSplit(
      x=collections.OrderedDict([(seq2seq.ENCODER_TOKEN_IDS, x_source),
                                 (seq2seq.DECODER_TOKEN_IDS, x_target)]),
      y=y, sources=list(sources), gold_sql=list(targets),
      truncated_sources=truncated_sources,
      truncated_targets=truncated_targets)


def _add_sql_hints(texts, folder: str, with_values: bool, *,
                   lowercase: bool, values: str) -> None:
  """Appends each source's retrieved SQL (`text2sql_task.DataConfig.retrieved_sql`),
  filled under `values` (`text2sql_task.DataConfig.retrieved_sql_values`) and lower-cased
  as the targets are with `lowercase`."""
  for name, splits in texts.items():
    queries = text2sql.read_client_queries(folder, name)
    questions = {
        split: template_retrieval.example_questions(splits[split][3],
                                                    queries, split)
        for split in text2sql.SPLITS}
    for split in text2sql.SPLITS:
      try:
        hints = template_retrieval.retrieved_sql(
            questions['train'],
            None if split == 'train' else questions[split],
            with_values=with_values, values=values)
      except ValueError as e:
        raise errors.InputError(
            f'{folder}: client {name!r}: retrieved_sql: {e}') from None
      if lowercase:
        hints = [text2sql_metrics.lowercase_sql(hint) for hint in hints]
      sources, *rest = splits[split]
      splits[split] = ([copy_tokenizer.with_sql_hint(source, hint)
                        for source, hint in zip(sources, hints)], *rest)


def prepare_task(config: text2sql_task.DataConfig, *, data_dir: Optional[str], seed: int,
                 tokenizer_dir: str, tokenizer=None) -> text2sql_task.Text2SqlTask:
  """Loads, subsets and tokenizes the clients' data.

  The tokenizer is read from `tokenizer_dir` when it holds one (a resumed
  run), else trained on the training sources and SQL of every client and
  written there.

  Args:
    config: The data configuration.
    data_dir: The `shared/data` folder or the text2sql folder (see
      `text2sql_source.find_text2sql_dir`); None finds it.
    seed: Seed of the example subsets.
    tokenizer_dir: Where the run keeps its tokenizer.
    tokenizer: A ready subword tokenizer to use instead (neither trained
      nor written), e.g. a keras-nlp preset's
      (`models.keras_nlp_preset.BartTokenizerAdapter`); not with
      `config.tokenizer='copy_words'`.

  Returns:
    The `text2sql_task.Text2SqlTask`.
  """
  folder = text2sql_source.find_text2sql_dir(data_dir)
  raw = text2sql.load_clients(config.clients, data_dir=data_dir,
                              with_values=config.with_values)
  texts = {}
  for name in config.clients:
    client = raw[name]
    texts[name] = {}
    for split in text2sql.SPLITS:
      limit = (config.max_train_examples[name] if split == 'train'
               else config.max_eval_examples)
      examples = _subset(getattr(client, split), limit, seed, name, split)
      if not examples:
        raise errors.InputError(
            f'{folder}: client {name!r} has no {split} examples.')
      sql = [e.sql for e in examples]
      variables = (None if config.with_values
                   else [e.variables for e in examples])
      if config.lowercase_sql:
        sql = [text2sql_metrics.lowercase_sql(q) for q in sql]
        # The anonymised SQL's variable names are lower-cased with it.
        variables = variables and [{k.lower(): v for k, v in names.items()}
                                   for names in variables]
      texts[name][split] = (
          [text2sql.model_input(e.question, client.schema,
                                columns=config.schema_columns,
                                lowercase_schema=config.lowercase_sql)
           for e in examples],
          sql, variables, examples)

  def training_texts():
    return [t for name in config.clients
            for part in texts[name]['train'][:2] for t in part]

  source_length = config.max_source_length
  target_length = config.max_target_length
  if tokenizer is not None and config.tokenizer == 'copy_words':
    raise errors.InputError(
        'A ready (e.g. keras-nlp preset) tokenizer replaces the subword one; '
        'it cannot be combined with --tokenizer=copy_words.')
  if config.tokenizer == 'copy_words':
    for name in config.clients:
      for split in text2sql.SPLITS:
        for text in texts[name][split][0] + texts[name][split][1]:
          copy_tokenizer.check_text(text, f'{folder}: client {name!r}')
    tokenizer = copy_tokenizer.load_or_build(
        tokenizer_dir,
        lambda: [pair for name in config.clients
                 for pair in zip(*texts[name]['train'][:2])],
        max_size=config.vocabulary_size, num_merges=config.sql_merges,
        reserved_input_words=((copy_tokenizer.SQL_HINT_MARK,)
                              if config.retrieved_sql else ()))
    if config.retrieved_sql:
      _add_sql_hints(texts, folder, config.with_values,
                     lowercase=config.lowercase_sql,
                     values=config.retrieved_sql_values)
    lengths = [(len(tokenizer.source_tokens(source)) + 1,
                len(tokenizer.target_tokens(target)) + 1)
               for name in config.clients for split in text2sql.SPLITS
               for source, target in zip(*texts[name][split][:2])]
    source_length = source_length or max(s for s, _ in lengths)
    target_length = target_length or max(t for _, t in lengths)
    decode_lengths = {
        name: 1 + max(len(copy_tokenizer.split_words(target))
                      for split in text2sql.SPLITS
                      for target in texts[name][split][1])
        for name in config.clients}
    encode = functools.partial(_encode_copy, tokenizer,
                               source_length=source_length,
                               target_length=target_length)
  else:
    decode_lengths = {}
    tokenizer = tokenizer or subword_tokenizer.load_or_train(
        tokenizer_dir, training_texts, config.vocabulary_size)
    encode = functools.partial(_encode, tokenizer, config=config)
  splits = {}
  for name in config.clients:
    splits[name] = {}
    for split in text2sql.SPLITS:
      sources, sql, variables, _ = texts[name][split]
      encoded = encode(sources, sql)
      if variables is not None:
        # Anonymised protocol: the model reads and writes variable names;
        # its SQL is scored with the values filled in (oracle entities).
        encoded.variables = variables
        encoded.gold_sql = [text2sql.fill_variables(q, v)
                            for q, v in zip(sql, variables)]
      splits[name][split] = encoded
  databases = {name: path for name, path in
               sql_execution.find_databases(folder).items()
               if name in config.clients}
  return text2sql_task.Text2SqlTask(tuple(config.clients), tokenizer, splits, databases,
                      source_length=source_length,
                      target_length=target_length,
                      decode_lengths=decode_lengths)


def prepare_template_task(config: text2sql_task.DataConfig, *, data_dir: Optional[str],
                          seed: int, ngrams: int,
                          values: str = text2sql.STATED) -> text2sql_task.Text2SqlTask:
  """`prepare_task` for the template parser (`text2sql_templates`).

  The "tokenizer" is a `text2sql_templates.TemplateTokenizer` (n-gram
  vocabulary and template classes, and `values`: how a predicted template
  is filled, `TemplateParserConfig.values`), rebuilt from the data on every
  call (it is deterministic, and takes seconds).
  """
  questions = text2sql_templates.load_questions(
      config, data_dir,
      lambda examples, name, split: _subset(
          examples, (config.max_train_examples[name] if split == 'train'
                     else config.max_eval_examples), seed, name, split))
  tokenizer = text2sql_templates.build_tokenizer(
      questions, vocabulary_size=config.vocabulary_size, ngrams=ngrams,
      values=values)
  splits = {}
  for name in config.clients:
    splits[name] = {}
    for split in text2sql.SPLITS:
      pairs = questions[name][split]
      x, y = tokenizer.encode(name, pairs)
      splits[name][split] = text2sql_task.EncodedSplit(
          x=x, y=y, sources=[' '.join(s.text.split()) for _, s in pairs],
          gold_sql=[text2sql.fill_sql(q, s) for q, s in pairs],
          truncated_sources=0, truncated_targets=0, questions=pairs)
  folder = text2sql_source.find_text2sql_dir(data_dir)
  databases = {name: path for name, path in
               sql_execution.find_databases(folder).items()
               if name in config.clients}
  return text2sql_task.Text2SqlTask(tuple(config.clients), tokenizer, splits, databases,
                      source_length=tokenizer.max_length, target_length=1)
