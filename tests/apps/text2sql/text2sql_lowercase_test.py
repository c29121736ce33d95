"""`DataConfig.lowercase_sql` on real data: what the parser reads, writes and
is scored against."""

import dataclasses

from absl.testing import parameterized
import tensorflow as tf

from tests.apps.text2sql import tiny_text2sql
from tff_nlp import training
from tff_nlp.data import text2sql as text2sql_data
from tff_nlp.metrics import text2sql as text2sql_metrics
from tff_nlp.models import seq2seq
from apps.text2sql import task_data as text2sql_task_data

_DATA = dataclasses.replace(tiny_text2sql.DATA, max_target_length=160)


class LowercaseSqlTest(tf.test.TestCase, parameterized.TestCase):

  def _task(self, **changes):
    return text2sql_task_data.prepare_task(
        dataclasses.replace(_DATA, **changes), data_dir=None, seed=0,
        tokenizer_dir=self.create_tempdir().full_path)

  @parameterized.named_parameters(('values', True), ('anonymised', False))
  def test_targets_gold_and_schema_lower_cased_values_kept(self,
                                                           with_values):
    plain = self._task(with_values=with_values)
    lowered = self._task(with_values=with_values, lowercase_sql=True)
    for client in tiny_text2sql.CLIENTS:
      for split in ('train', 'test'):
        a, b = plain.splits[client][split], lowered.splits[client][split]
        # The gold SQL exact match compares: the plain one, lower-cased
        # outside its values (anonymised: filled after lower-casing, the
        # same here, where no unquoted value has a capital).
        self.assertEqual(
            b.gold_sql,
            [text2sql_metrics.lowercase_sql(sql) for sql in a.gold_sql])
        self.assertNotEqual(b.gold_sql, a.gold_sql)
        # The question keeps its case, the schema's names do not.
        for source_a, source_b in zip(a.sources, b.sources):
          question, _, schema = source_a.partition(
              text2sql_data.SCHEMA_SEPARATOR)
          self.assertEqual(source_b, question + text2sql_data.SCHEMA_SEPARATOR
                           + schema.lower())
        # The decoder is trained to write it: its targets detokenize to the
        # lower-cased SQL (anonymised: with the variable names), all but
        # those cut at the maximum length to the whole of it.
        whole = 0
        for i, row in enumerate(b.y):
          target = lowered.tokenizer.detokenize(
              [int(t) for t in row if t > seq2seq.END_ID]).numpy().decode()
          if not with_values:
            target = text2sql_data.fill_variables(target, b.variables[i])
          self.assertStartsWith(b.gold_sql[i], target)
          whole += target == b.gold_sql[i]
        self.assertEqual(whole, len(b.y) - b.truncated_targets)
        self.assertGreater(whole, 0)

  def test_a_quoted_value_keeps_its_case(self):
    lowered = self._task(lowercase_sql=True)
    # geography's gold SQL quotes its values (state and city names).
    quoted = [sql for split in lowered.splits['geography'].values()
              for sql in split.gold_sql if '"' in sql]
    self.assertNotEmpty(quoted)
    for sql in quoted:
      self.assertEqual(sql, text2sql_metrics.lowercase_sql(sql))
      self.assertEqual(sql.split('"')[0], sql.split('"')[0].lower())

  def test_omitted_from_the_records_while_false(self):
    # Runs recorded before the option keep their configuration and cache
    # keys (`training.config_digest`).
    self.assertNotIn('lowercase_sql', training.to_json_value(_DATA))
    self.assertEqual(training.to_json_value(dataclasses.replace(
        _DATA, lowercase_sql=True))['lowercase_sql'], True)
    before = {k: v for k, v in training.to_json_value(_DATA).items()}
    self.assertEqual(training.config_digest(_DATA),
                     training.config_digest(before))


if __name__ == '__main__':
  tf.test.main()
