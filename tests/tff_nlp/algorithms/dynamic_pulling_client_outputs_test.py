"""Per-client outputs of dynamic pulling (`client_outputs=True`).

The model and clients are those of dynamic_pulling_test.py: a chain of four
linear Dense layers (8 tensors, 'encoder' 0-3 and 'decoder' 4-7) and
`linear_model.three_clients()` (7, 4 and 10 examples). dp_l sends, per
group, the tensors whose change is below the group's median: 2 of 4.
"""

import collections

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tests import linear_model
from tests import test_helpers
from tests.tff_nlp.algorithms import process_fixtures
from tff_nlp.algorithms import dynamic_pulling
from tff_nlp.templates import client_work as client_work_lib
from tff_nlp.templates import stateful_clients

_SIZES = [w.size for w in process_fixtures.DP_INITIAL]
_NUM_EXAMPLES = (7, 4, 10)
# Client 0 gives a data size (the paper's corpus-size weight), client 1
# none (its examples weigh), client 2 another.
_DATA_SIZES = (50.0, 0.0, 20.0)


def _process(client_outputs: bool):
  return process_fixtures.build_dynamic_pulling(
      'dp_l', client_outputs=client_outputs)


class DynamicPullingClientOutputsComputationTest(tf.test.TestCase):

  def test_next_returns_the_round_plus_each_clients_statistics(self):
    with_outputs = _process(client_outputs=True).next.type_signature
    plain = _process(client_outputs=False).next.type_signature
    self.assertIs(with_outputs.result.python_container,
                  stateful_clients.RoundOutputWithClientOutputs)
    self.assertIs(plain.result.python_container, stateful_clients.RoundOutput)
    tff.test.assert_types_equivalent(plain.parameter, with_outputs.parameter)
    tff.test.assert_types_equivalent(
        plain.result,
        tff.StructType([(name, with_outputs.result[name])
                        for name in stateful_clients.RoundOutput._fields]))
    expected = collections.OrderedDict(
        [(key, tff.TensorType(np.float32)) for key in
         client_work_lib.CLIENT_STAT_KEYS]
        + [('weight', tff.TensorType(np.float32)),
           (client_work_lib.BATCH_LOSSES_KEY,
            tff.TensorType(np.float32, [None])),
           ('sent', tff.TensorType(np.bool_, [len(_SIZES)])),
           ('parameters_pulled', tff.TensorType(np.int64)),
           ('bytes_pulled', tff.TensorType(np.int64))])
    actual = with_outputs.result.client_outputs
    self.assertEqual(actual.placement, tff.CLIENTS)
    self.assertEqual(list(tff.structure.name_list(actual.member)),
                     list(expected))
    for name in ('weight', 'sent', 'parameters_pulled', 'bytes_pulled',
                 client_work_lib.BATCH_LOSSES_KEY):
      tff.test.assert_types_equivalent(actual.member[name], expected[name])


class DynamicPullingClientOutputsExecutionTest(tf.test.TestCase):

  def test_outputs_match_the_metrics_and_the_round_is_unchanged(self):
    process = _process(client_outputs=True)
    plain = _process(client_outputs=False)
    clients = linear_model.three_clients()
    state, plain_state = process.initialize(), plain.initialize()
    client_states = [dynamic_pulling.initial_client_state(process)] * 3
    plain_client_states = list(client_states)
    for round_num in range(2):
      data = process_fixtures.dp_client_data(clients, round_num,
                                             list(_DATA_SIZES))
      output = process.next(state, data, client_states)
      plain_output = plain.next(plain_state, data, plain_client_states)
      test_helpers.assert_nested_allclose(output.state, plain_output.state)
      test_helpers.assert_nested_allclose(output.metrics,
                                          plain_output.metrics)
      test_helpers.assert_nested_allclose(list(output.client_states),
                                          list(plain_output.client_states))
      outputs = list(output.client_outputs)
      sent = np.array([o['sent'] for o in outputs])
      # dp_l: 2 of each group's 4 tensors per client, so 4 of 8.
      np.testing.assert_array_equal(sent.sum(axis=1), [4, 4, 4])
      # What each client sent is its new state's mask.
      np.testing.assert_array_equal(
          sent, [s.shared for s in output.client_states])
      pulled = [int(np.dot(s, _SIZES)) for s in sent]
      self.assertEqual([int(o['parameters_pulled']) for o in outputs],
                       pulled)
      self.assertEqual([int(o['bytes_pulled']) for o in outputs],
                       [4 * p for p in pulled])
      self.assertEqual(sum(pulled), output.metrics['parameters_pulled'])
      self.assertEqual(
          collections.OrderedDict(encoder=int(sent[:, :4].sum()),
                                  decoder=int(sent[:, 4:].sum())),
          output.metrics['tensors_sent'])
      # The weight applied: the data size where given, else the examples.
      self.assertEqual([float(o['weight']) for o in outputs],
                       [50.0, 4.0, 20.0])
      self.assertEqual([float(o['num_examples']) for o in outputs],
                       list(_NUM_EXAMPLES))
      # Batches of 3+3+1, 2+2 and 4+4+2 examples.
      self.assertEqual([len(o[client_work_lib.BATCH_LOSSES_KEY])
                        for o in outputs], [3, 2, 3])
      state, client_states = output.state, list(output.client_states)
      plain_state = plain_output.state
      plain_client_states = list(plain_output.client_states)


if __name__ == '__main__':
  tf.test.main()
