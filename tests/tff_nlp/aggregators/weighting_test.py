"""Direct tests of `aggregators.weighting`, against hand-derived numbers."""

import enum

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from tff_nlp.aggregators import weighting

# Three clients: |D_i| = 100, 20, 5; batch losses (max, min) of the round
# (2.0, 1.5), (3.0, 1.0), (4.0, 0.5), so ΔL_i = 0.5, 2.0, 3.5.
_SIZES = (100.0, 20.0, 5.0)
_REDUCTIONS = (0.5, 2.0, 3.5)


class _Colour(enum.Enum):
  RED = 'red'


class WeightingExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters(
      # |D_i| / 125.
      (weighting.Weighting.NUM_EXAMPLES, (100, 20, 5), (0.8, 0.16, 0.04)),
      (weighting.Weighting.UNIFORM, (1, 1, 1), (1 / 3, 1 / 3, 1 / 3)),
      # ΔL_i / 6.0.
      (weighting.Weighting.LOSS_REDUCTION, (0.5, 2.0, 3.5),
       (0.5 / 6, 2.0 / 6, 3.5 / 6)),
      # |D_i| · ΔL_i = 50, 40, 17.5; sum 107.5.
      (weighting.Weighting.LORAR, (50.0, 40.0, 17.5),
       (50 / 107.5, 40 / 107.5, 17.5 / 107.5)),
  )
  def test_raw_and_normalised_weights(self, mechanism, raw, normalised):
    weights = [float(weighting.raw_client_weight(
        mechanism, tf.constant(size), tf.constant(reduction)))
               for size, reduction in zip(_SIZES, _REDUCTIONS)]
    np.testing.assert_allclose(weights, raw, rtol=1e-6)
    np.testing.assert_allclose(np.array(weights) / sum(weights), normalised,
                               rtol=1e-6)

  def test_lorar_favours_the_small_client_that_learns_most(self):
    # The 5-example client's share rises from 4% (|D_i|) to 16.3% (Lorar).
    lorar = [float(weighting.raw_client_weight(
        weighting.Weighting.LORAR, tf.constant(s), tf.constant(r)))
             for s, r in zip(_SIZES, _REDUCTIONS)]
    self.assertAllClose(lorar[2] / sum(lorar), 17.5 / 107.5)
    self.assertGreater(lorar[2] / sum(lorar), _SIZES[2] / sum(_SIZES))

  @parameterized.parameters(
      (weighting.Weighting.NUM_EXAMPLES, False),
      (weighting.Weighting.UNIFORM, False),
      (weighting.Weighting.LOSS_REDUCTION, True),
      (weighting.Weighting.LORAR, True),
  )
  def test_uses_loss_reduction(self, mechanism, uses):
    self.assertIs(mechanism.uses_loss_reduction, uses)


class ParseOptionExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.parameters('lorar', weighting.Weighting.LORAR)
  def test_parse_option(self, value):
    self.assertIs(
        weighting.parse_option(value, weighting.Weighting, 'weighting'),
        weighting.Weighting.LORAR)

  def test_parse_option_names_the_argument_and_the_choices(self):
    with self.assertRaisesRegex(ValueError, (
        r"Unknown weighting 'median'; expected one of: 'num_examples', "
        r"'uniform', 'loss_reduction', 'lorar'\.")):
      weighting.parse_option('median', weighting.Weighting, 'weighting')
    with self.assertRaisesRegex(ValueError,
                                r"Unknown colour 'blue'; .*'red'"):
      weighting.parse_option('blue', _Colour, 'colour')


if __name__ == '__main__':
  tf.test.main()
