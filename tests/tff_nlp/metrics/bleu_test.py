"""Tests of SacreBLEU corpus BLEU and the per-domain BLEU table."""

import json
import math

from absl.testing import parameterized
import sacrebleu
import tensorflow as tf

from tff_nlp import metrics
from tff_nlp.metrics import bleu

# Two pairs, scored by hand with SacreBLEU's 13a tokenizer (which splits the
# final '.' and '!' off 'morning'):
#
#   hyp 1: the quick brown fox jumps over a dog          (8 tokens)
#   ref 1: the quick brown fox jumps over the lazy dog   (9 tokens)
#   hyp 2: Good morning .                                (3 tokens)
#   ref 2: Good morning !                                (3 tokens)
#
# Matched / total n-grams (clipped by the reference counts):
#   1-grams: 7/8 (all but 'a') + 2/3 ('Good', 'morning')       = 9/11
#   2-grams: 5/7 ('the quick' .. 'jumps over') + 1/2 ('Good morning') = 6/9
#   3-grams: 4/6 ('the quick brown' .. 'fox jumps over') + 0/1       = 4/7
#   4-grams: 3/5 ('the quick brown fox' .. 'brown fox jumps over') + 0/0
#                                                                    = 3/5
# Every order has matches, so `exp` smoothing never applies (pair 2 alone
# has no 3-gram match: corpus BLEU sums counts, it does not average sentence
# BLEU). Lengths 11 < 12: brevity penalty exp(1 - 12/11) = exp(-1/11).
# BLEU = 100 * exp(-1/11) * (9/11 * 6/9 * 4/7 * 3/5) ** (1/4)
#      = 100 * exp(-1/11) * (72/385) ** (1/4)
#      = 100 * 0.913101 * 0.657609 = 60.0464 (to 4 decimals).
_HYPOTHESES = ('the quick brown fox jumps over a dog', 'Good morning.')
_REFERENCES = ('the quick brown fox jumps over the lazy dog', 'Good morning!')
_HAND_BLEU = 100 * math.exp(-1 / 11) * (72 / 385) ** 0.25
_HAND_PRECISIONS = (100 * 9 / 11, 100 * 6 / 9, 100 * 4 / 7, 100 * 3 / 5)

_COLUMNS = ('wmt_news', 'ted_iwslt14', 'php_docs')
_HEADER = ('| Model | Source | wmt_news | ted_iwslt14 | php_docs | avg |\n'
           '|---|---|---:|---:|---:|---:|\n')


class CorpusBleuExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def test_perfect_translation_scores_100(self):
    sentences = ['Das ist ein Test .', 'A man rides a red bike down the hill.',
                 'Öffne die Datei %s nicht!']
    result = bleu.corpus_bleu(sentences, sentences)
    self.assertAlmostEqual(result.score, 100.0, places=9)
    self.assertEqual(result.precisions, (100.0,) * 4)
    self.assertEqual(result.brevity_penalty, 1.0)
    self.assertEqual(result.num_sentences, 3)

  def test_hand_computed_corpus_bleu(self):
    result = bleu.corpus_bleu(_HYPOTHESES, _REFERENCES)
    self.assertAlmostEqual(result.score, _HAND_BLEU, delta=1e-6)
    self.assertAlmostEqual(result.score, 60.0464, places=4)
    for ours, hand in zip(result.precisions, _HAND_PRECISIONS, strict=True):
      self.assertAlmostEqual(ours, hand, delta=1e-9)
    self.assertAlmostEqual(result.brevity_penalty, math.exp(-1 / 11),
                           delta=1e-12)
    self.assertEqual((result.hypothesis_length, result.reference_length),
                     (11, 12))
    self.assertEqual(result.num_sentences, 2)

  def test_signature_is_sacrebleus_default(self):
    result = bleu.corpus_bleu(_HYPOTHESES, _REFERENCES)
    self.assertIn('tok:13a', result.signature.split('|'))
    self.assertEqual(
        result.signature,
        'nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp|'
        f'version:{sacrebleu.__version__}')

  def test_to_json(self):
    result = bleu.corpus_bleu(_HYPOTHESES, _REFERENCES)
    as_json = json.loads(json.dumps(result.to_json()))
    self.assertEqual(
        list(as_json),
        ['score', 'signature', 'num_sentences', 'precisions',
         'brevity_penalty', 'hypothesis_length', 'reference_length'])
    self.assertEqual(as_json['score'], result.score)
    self.assertEqual(as_json['signature'], result.signature)
    self.assertEqual(as_json['precisions'], list(result.precisions))
    self.assertEqual(as_json['num_sentences'], 2)

  @parameterized.named_parameters(
      ('more_hypotheses', 3, 2),
      ('more_references', 1, 2),
      ('empty', 0, 0),
  )
  def test_lengths_must_match_and_be_nonzero(self, num_hyps, num_refs):
    with self.assertRaisesRegex(
        ValueError, f'got {num_hyps} hypotheses and {num_refs} references'):
      bleu.corpus_bleu(['a b c d'] * num_hyps, ['a b c d'] * num_refs)

  @parameterized.named_parameters(
      ('string_hypotheses', 'a b c d', ['a b c d']),
      ('non_string_reference', ['a b c d'], [None]),
  )
  def test_wrong_types(self, hypotheses, references):
    with self.assertRaises(TypeError):
      bleu.corpus_bleu(hypotheses, references)

  def test_exported(self):
    self.assertIs(metrics.corpus_bleu, bleu.corpus_bleu)
    self.assertIs(metrics.BleuResult, bleu.BleuResult)
    self.assertIs(metrics.bleu_table_markdown, bleu.bleu_table_markdown)


class BleuTableMarkdownExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def test_ours_paper_averages_and_missing_cells(self):
    scores = {
        # avg (20 + 25.5 + 30.25) / 3 = 75.75 / 3 = 25.25, all columns.
        'server': {'wmt_news': 20.0, 'ted_iwslt14': 25.5, 'php_docs': 30.25},
        # avg (22 + 10) / 2 = 16.00 over 2 of 3 columns: marked '*'.
        'wmt_news engine': {'php_docs': 10.0, 'wmt_news': 22.0},
    }
    paper = {
        # avg (21.3 + 24.1 + 29.0) / 3 = 74.4 / 3 = 24.80.
        'server': {'wmt_news': 21.3, 'ted_iwslt14': 24.1, 'php_docs': 29.0},
        # The paper's own average is printed as reported.
        'wmt_news engine': {'wmt_news': 23.0, 'avg': 18.5},
        # Not run by us: our row is all '–'; avg (25 + 26 + 27) / 3 = 26.
        'centralized': {'wmt_news': 25.0, 'ted_iwslt14': 26.0,
                        'php_docs': 27.0},
    }
    self.assertEqual(
        bleu.bleu_table_markdown(scores, columns=_COLUMNS, paper=paper),
        _HEADER +
        '| server | ours | 20.00 | 25.50 | 30.25 | 25.25 |\n'
        '| server | paper | 21.30 | 24.10 | 29.00 | 24.80 |\n'
        '| wmt_news engine | ours | 22.00 | – | 10.00 | 16.00* |\n'
        '| wmt_news engine | paper | 23.00 | – | – | 18.50 |\n'
        '| centralized | ours | – | – | – | – |\n'
        '| centralized | paper | 25.00 | 26.00 | 27.00 | 26.00 |')

  def test_without_paper_or_average(self):
    scores = {'server': {'ted_iwslt14': 12.346, 'php_docs': 7.0},
              'a|b': {'wmt_news': 1.0}}
    self.assertEqual(
        bleu.bleu_table_markdown(scores, columns=_COLUMNS, average=False),
        '| Model | Source | wmt_news | ted_iwslt14 | php_docs |\n'
        '|---|---|---:|---:|---:|\n'
        '| server | ours | – | 12.35 | 7.00 |\n'
        r'| a\|b | ours | 1.00 | – | – |')
    # The paper's partial average, computed (not reported): (4 + 8) / 2.
    self.assertEqual(
        bleu.bleu_table_markdown({}, columns=_COLUMNS,
                                 paper={'server': {'wmt_news': 4.0,
                                                   'php_docs': 8.0}}),
        _HEADER +
        '| server | ours | – | – | – | – |\n'
        '| server | paper | 4.00 | – | 8.00 | 6.00* |')

  @parameterized.named_parameters(
      ('unknown_column', {'server': {'medical': 1.0}}, None, _COLUMNS,
       r"Our row 'server': unknown columns \['medical'\]"),
      ('avg_in_ours', {'server': {'avg': 1.0}}, None, _COLUMNS,
       r"unknown columns \['avg'\]"),
      ('unknown_paper_column', {}, {'x': {'multi30k_captions': 1.0}},
       _COLUMNS, "Paper row 'x': unknown columns"),
      ('not_a_number', {'server': {'php_docs': '1.0'}}, None, _COLUMNS,
       'is not a number'),
      ('nan', {'server': {'php_docs': float('nan')}}, None, _COLUMNS,
       'is not a number'),
      ('no_columns', {}, None, (), 'one or more distinct'),
      ('repeated_column', {}, None, ('php_docs', 'php_docs'),
       'one or more distinct'),
  )
  def test_invalid_input(self, scores, paper, columns, expected):
    with self.assertRaisesRegex(ValueError, expected):
      bleu.bleu_table_markdown(scores, columns=columns, paper=paper)


if __name__ == '__main__':
  tf.test.main()
