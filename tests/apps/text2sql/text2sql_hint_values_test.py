"""`DataConfig.retrieved_sql_values`: what the retrieve-and-edit hint holds."""

import dataclasses

from absl.testing import parameterized
import tensorflow as tf

from tff_nlp import training
from tff_nlp.data import text2sql as text2sql_data
from tff_nlp.models import copy_tokenizer
from apps.text2sql import task as text2sql_task
from apps.text2sql import task_data as text2sql_task_data

# ATIS states dates as weekdays ("on monday") and annotates them as
# day_number0 = 21, month_number0 = 2: the values the stated filling keeps
# out of the hint. 300 training questions, the whole test split.
_DATA = text2sql_task.DataConfig(
    clients=('atis',), schema_columns=False, tokenizer='copy_words',
    vocabulary_size=2000, retrieved_sql=True, max_source_length=0,
    max_target_length=0, max_train_examples=300)


class HintValuesTest(tf.test.TestCase, parameterized.TestCase):

  def test_records_keep_the_keys_of_earlier_runs(self):
    # Without a hint the field means nothing and is left out of the records.
    plain = text2sql_task.DataConfig()
    self.assertEqual(plain.retrieved_sql_values, text2sql_data.ANNOTATED)
    self.assertNotIn('retrieved_sql_values', training.to_json_value(plain))
    # With a hint the headline filling is recorded; the annotated one (every
    # run made before the field) is not, so those runs keep their keys.
    self.assertEqual(
        training.to_json_value(_DATA)['retrieved_sql_values'], 'stated')
    oracle = dataclasses.replace(_DATA, retrieved_sql_values='annotated')
    self.assertNotIn('retrieved_sql_values', training.to_json_value(oracle))
    self.assertNotEqual(training.config_digest(_DATA),
                        training.config_digest(oracle))

  def test_unknown_filling_is_refused(self):
    with self.assertRaisesRegex(ValueError, 'retrieved_sql_values'):
      dataclasses.replace(_DATA, retrieved_sql_values='gold')

  def test_hints_follow_the_filling(self):
    hints = {}
    for values in text2sql_data.VALUE_SOURCES:
      task = text2sql_task_data.prepare_task(
          dataclasses.replace(_DATA, retrieved_sql_values=values),
          data_dir=None, seed=0,
          tokenizer_dir=self.create_tempdir().full_path)
      hints[values] = [source.split(copy_tokenizer.SQL_HINT_MARK, 1)[1]
                       for source in task.splits['atis']['test'].sources]
    self.assertLen(hints['stated'], 447)
    # The oracle filling copies values the question never states into the
    # hint (and the query's example values where the question leaves a
    # variable empty); the stated one takes the retrieved training
    # example's. Measured: 101 of the 447 test hints differ.
    differ = sum(a != b for a, b in zip(hints['stated'], hints['annotated']))
    self.assertEqual(differ, 101)


if __name__ == '__main__':
  tf.test.main()
