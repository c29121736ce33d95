"""tff_nlp's learning processes embed in TFF's own training pipeline.

`tff.simulation.run_training_process` drives an `FLProcess` with TFF's
program state manager (checkpoints, resume) and release managers (metrics),
and gives the same model as calling `next` by hand.
"""

import asyncio
import os

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tests import linear_model
from tff_nlp import algorithms

_CLIENTS = linear_model.three_clients()


def _process():
  return algorithms.build_fl_process(
      linear_model.model_fn,
      algorithm='fedprox',
      weighting='lorar',
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.05),
      proximal_strength=0.1,
  )


def _clients_of_round(round_num):
  # Rounds alternate between two client pairs, so the data depends on the
  # round number as TFF's selection function allows.
  ids = [0, 1] if round_num % 2 else [1, 2]
  return [linear_model.to_dataset(_CLIENTS[i]) for i in ids]


def _mse(weights):
  kernel, bias = (np.asarray(w) for w in weights.trainable)
  x = np.concatenate([c.x for c in _CLIENTS])
  y = np.concatenate([c.y for c in _CLIENTS])
  return float(np.mean((x @ kernel + bias - y) ** 2))


class TffSimulationExecutionTest(tf.test.TestCase):

  def test_runs_and_resumes_in_tff_simulation_loop(self):
    tmp_path = self.create_tempdir().full_path
    process = _process()
    state_manager = tff.program.FileProgramStateManager(
        os.path.join(tmp_path, 'state'), prefix='round_')
    memory = tff.program.MemoryReleaseManager()
    csv_manager = tff.program.CSVFileReleaseManager(
        os.path.join(tmp_path, 'm.csv'))

    def evaluation_fn(state, unused_data):
      return {'mse': _mse(process.get_model_weights(state))}

    def run(total_rounds):
      return tff.simulation.run_training_process(
          process,
          training_selection_fn=_clients_of_round,
          total_rounds=total_rounds,
          evaluation_fn=evaluation_fn,
          evaluation_selection_fn=lambda round_num: None,
          rounds_per_evaluation=2,
          program_state_manager=state_manager,
          rounds_per_saving_program_state=1,
          metrics_managers=[memory, csv_manager],
      )

    # TFF's loop calls `asyncio.get_event_loop()`, which raises in a main
    # thread whose loop an earlier `asyncio.run` (any test's) has unset.
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
      run(3)
      final_state = run(5)  # Resumes from the round 3 checkpoint.
    finally:
      asyncio.set_event_loop(None)
      loop.close()

    by_hand = [process.initialize()]
    for round_num in range(1, 6):
      by_hand.append(
          process.next(by_hand[-1], _clients_of_round(round_num)).state)
    for w, w_expected in zip(process.get_model_weights(final_state).trainable,
                             process.get_model_weights(by_hand[5]).trainable):
      np.testing.assert_allclose(w, w_expected, rtol=0, atol=1e-6)

    released = dict(memory.values())
    # Training metrics of every round once (rounds 4-5 from the second call),
    # with the Lorar weighting statistics of the round.
    self.assertEqual(sorted(k for k in released if k > 0), [1, 2, 3, 4, 5])
    self.assertEqual(
        released[5]['client_work']['weighting']['num_clients'], 2)
    # Evaluation every second round, under TFF's `evaluation/` prefix.
    for round_num in (2, 4):
      np.testing.assert_allclose(
          released[round_num]['evaluation/mse'],
          _mse(process.get_model_weights(by_hand[round_num])), rtol=1e-6)
    self.assertNotIn('evaluation/mse', released[3])
    versions = asyncio.run(state_manager.get_versions())
    self.assertEqual(max(versions), 5)


if __name__ == '__main__':
  tf.test.main()
