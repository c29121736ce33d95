"""Tests of `ResidentProcess`: rounds with the server state kept in a worker."""

from absl.testing import parameterized
import numpy as np
import tensorflow as tf

from tests import tag_fixtures as fx
from tff_nlp import runtime
from apps.partial_models import tag_process as sparse_tags


def _process():
  return sparse_tags.build_sparse_tag_process(
      num_words=fx.V, num_tags=fx.T, max_keys=3, client_learning_rate=fx.LR)


def _flat(structure):
  return [np.asarray(x) for x in tf.nest.flatten(structure)]


class ResidentProcessExecutionTest(tf.test.TestCase, parameterized.TestCase):

  @parameterized.named_parameters(('data_from_python', False),
                                  ('data_in_the_worker', True))
  def test_rounds_equal_process_next_rounds(self, data_in_worker):
    process = _process()
    start = process.initialize()
    with runtime.local_cpp_context() as context:
      # Two rounds from Python (the state crosses every round) ...
      state, expected_metrics = start, []
      for _ in range(2):
        output = process.next(state, fx.datasets())
        state, _ = output.state, expected_metrics.append(output.metrics)
      # ... and the same two with the state kept in the worker.
      with runtime.ResidentProcess(process, context.worker,
                                   num_clients=len(fx.CLIENTS)) as resident:
        resident.set_state(start)
        # Kept in the worker, the same datasets serve both rounds (each
        # iterated anew, as process.next does with its argument).
        data = (resident.put_client_data(fx.datasets()) if data_in_worker
                else None)
        metrics = [resident.next(data or fx.datasets()) for _ in range(2)]
        resident_state = resident.state()
    for got, want in zip(metrics, expected_metrics):
      self.assertEqual(got['client_work']['train']['num_examples'],
                       want['client_work']['train']['num_examples'])
      for a, b in zip(_flat(got), _flat(want)):
        np.testing.assert_allclose(a, b, rtol=1e-6)
    np.testing.assert_allclose(
        process.get_model_weights(resident_state).trainable[0],
        process.get_model_weights(state).trainable[0], rtol=1e-6)
    # The model moved: the rounds trained something.
    self.assertGreater(np.abs(
        process.get_model_weights(resident_state).trainable[0]).sum(), 0)

  def test_two_resident_processes_share_a_worker(self):
    # select_scaling interleaves a dense and several sparse resident
    # processes on one worker, opening and closing the sparse ones while the
    # dense one lives on: each must still equal its own process.next rounds.
    first = _process()
    second = sparse_tags.build_sparse_tag_process(
        num_words=fx.V, num_tags=fx.T, max_keys=2, client_learning_rate=fx.LR)
    with runtime.local_cpp_context() as context:
      want = []
      for process in (first, second):
        state = process.initialize()
        for _ in range(2):
          state = process.next(state, fx.datasets()).state
        want.append(process.get_model_weights(state).trainable[0])
      with runtime.ResidentProcess(first, context.worker,
                                   num_clients=len(fx.CLIENTS)) as one:
        one.set_state(first.initialize())
        one.next(fx.datasets())
        with runtime.ResidentProcess(second, context.worker,
                                     num_clients=len(fx.CLIENTS)) as two:
          two.set_state(second.initialize())
          for _ in range(2):
            two.next(fx.datasets())
          got_second = second.get_model_weights(two.state()).trainable[0]
        # The first one's state outlives the second's executor.
        one.next(fx.datasets())
        got_first = first.get_model_weights(one.state()).trainable[0]
    np.testing.assert_allclose(got_first, want[0], rtol=1e-6)
    np.testing.assert_allclose(got_second, want[1], rtol=1e-6)
    # M = 3 and M = 2 train different rows: the two states are not mixed up.
    self.assertGreater(np.abs(want[0] - want[1]).max(), 1e-4)

  def test_refuses_misuse(self):
    process = _process()
    with runtime.local_cpp_context() as context:
      resident = runtime.ResidentProcess(process, context.worker,
                                         num_clients=len(fx.CLIENTS))
      with self.assertRaisesRegex(RuntimeError, 'before set_state'):
        resident.next(fx.datasets())
      resident.set_state(process.initialize())
      with self.assertRaisesRegex(ValueError, 'client_data has 1 clients'):
        resident.next(fx.datasets()[:1])
      with self.assertRaisesRegex(ValueError, 'client_data has 1 clients'):
        resident.put_client_data(fx.datasets()[:1])
      with runtime.ResidentProcess(process, context.worker,
                                   num_clients=len(fx.CLIENTS)) as other:
        elsewhere = other.put_client_data(fx.datasets())
        with self.assertRaisesRegex(ValueError, 'another ResidentProcess'):
          resident.next(elsewhere)
      resident.close()
      with self.assertRaisesRegex(ValueError, 'num_clients must be >= 1'):
        runtime.ResidentProcess(process, context.worker, num_clients=0)


if __name__ == '__main__':
  tf.test.main()
