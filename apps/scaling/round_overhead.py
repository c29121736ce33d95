"""What a TFF round costs over the same local training in plain TensorFlow.

One round of `tff_nlp.algorithms.build_fl_process` (FedAvg, Lorar weighting,
per-client learning rate and epochs) is timed against hand-written
pure-TensorFlow rounds doing the same work for the same clients: each client
starts from the same global weights, trains on the same batches with the same
`tff.learning.optimizers` optimizer and the same `from_keras_model` loss,
tracks its batch losses (Lorar needs max - min), and the server applies the
Lorar-weighted mean delta with SGD at learning rate 1.

Two workloads (`round_overhead_workloads.MODELS`):

*   `r8_classifier`: the r8 demo task and bag-of-embeddings classifier of
    `apps.common.text_classification_task` (`R8Setup`), client SGD;
*   `text2sql_seq2seq`: the text-to-SQL clients and Keras seq2seq model as
    the task builds them (`apps.text2sql.task_data.prepare_task`,
    `text2sql_process.build_process` and `build_client_data_fn`), with the
    cpu preset's data, model and local training (`text2sql_setup`), client
    Adam.

Four sides (`SIDES`) run in one process, interleaved, each from the same
initial state in every round:

*   `tff`: TFF in a context with the given `ContextSettings` (by default
    unlimited concurrency: the worker trains every client at once);
*   `tff_c1`: TFF in a second context, with its own worker, with
    `max_concurrent_computation_calls=1`: one client at a time, the schedule
    of the pure-TF loops;
*   `pure_tf_while` and `pure_tf_steps`: the two client loops of
    `round_overhead_pure_tf.PureTfRound` (a `tf.function` per client
    looping over its batches with `templates.batch_loop.for_each_batch`,
    as TFF's client work; a Python loop of `tf.function` steps), then the
    weighted mean and server step in eager TensorFlow. The faster is the
    reference of the ratios, so a slow hand-written loop cannot flatter TFF.

After one warm-up round each, every side's global model must match the
others' (`check_same_model`), so the timings compare the same work. Where
the time goes (`run_round_overhead`'s `breakdown`, per side):

*   tracing and compilation: first round minus the median steady round;
    besides, the one-off Python tracing when the process is built;
*   serialization (TFF sides): `tff.framework.serialize_value` of what a
    round passes through TFF's Python runtime: the state and the client
    datasets, and the compiled round computation, which the context sends
    with every call, and the result, which the worker serializes in C++
    (timed here in Python, an estimate); with byte sizes;
*   compute: the pure-TF per-client training time, summed over clients (on
    the TFF sides: the reference loop's);
*   remainder: round minus serialization minus compute. On the TFF sides:
    scheduling, gRPC, deserialization, and any difference in how fast the
    worker trains the clients (negative when it overlaps clients or trains
    them faster than the reference); on the pure-TF sides: the server step.
"""

import collections
from collections.abc import Mapping
import contextlib
import dataclasses
import os
import statistics
import time
from typing import Any, Optional

import numpy as np
import tensorflow_federated as tff

from tff_nlp import runtime
from tff_nlp import training as training_lib
from apps.scaling import round_overhead_pure_tf
from apps.scaling import round_overhead_workloads

# Issue 2's target for TFF's round time over the pure-TF reference.
TARGET_RATIO = 1.15
# Sides of the comparison, as keys of the result.
TFF = 'tff'
TFF_C1 = 'tff_c1'
PURE_TF_WHILE = 'pure_tf_while'
PURE_TF_STEPS = 'pure_tf_steps'
SIDES = (TFF, TFF_C1, PURE_TF_WHILE, PURE_TF_STEPS)
PURE_TF_SIDES = {PURE_TF_WHILE: round_overhead_pure_tf.WHILE,
                 PURE_TF_STEPS: round_overhead_pure_tf.STEPS}
# Values serialized in a round, as keys of `result['serialization']`.
SERIALIZED = ('state', 'client_data', 'computation', 'result')


def _serialize(process, state, client_data, result, computation
               ) -> collections.OrderedDict:
  """Seconds and bytes of `tff.framework.serialize_value` of each value."""
  state_type, data_type = process.next.type_signature.parameter
  values = dict(
      state=(state, state_type),
      client_data=(client_data, data_type),
      computation=(computation, computation.type_signature),
      result=(result, process.next.type_signature.result),
  )
  measured = collections.OrderedDict()
  for name in SERIALIZED:
    value, value_type = values[name]
    start = time.perf_counter()
    proto, _ = tff.framework.serialize_value(value, value_type)
    measured[name] = (time.perf_counter() - start, proto.ByteSize())
  return measured


def _concurrency_label(calls: int) -> str:
  return str(calls) if calls > 0 else 'unlimited'


def _measure(workload: round_overhead_workloads.Workload,
             pure_tf_round: round_overhead_pure_tf.PureTfRound,
             contexts: Mapping[str, Any], *, computation,
             repeats: int) -> dict[str, Any]:
  """Runs the warm-up, the check and the interleaved timed rounds.

  Args:
    workload: The round's work.
    pure_tf_round: The pure-TF reference.
    contexts: The TFF sides' execution contexts, by side.
    computation: The compiled round computation, to serialize.
    repeats: Timed rounds per side.

  Returns:
    A dict: `initial` weights, per side `times` (timed rounds) and `first`
    (the warm-up), per pure-TF side `compute` (per timed round, its clients'
    seconds summed), `differences` (`check_same_model`) and per serialized
    value its (seconds, bytes) per repeat (`serialization`).
  """
  process = workload.process
  stack = tff.framework.get_context_stack()
  with stack.install(contexts[TFF]):
    state = process.initialize()
    initial = [np.asarray(w) for w in
               process.get_model_weights(state).trainable]
  times = {side: [] for side in SIDES}
  first = {}
  compute = {side: [] for side in PURE_TF_SIDES}
  serialization = collections.defaultdict(list)
  outputs = {}

  def run_side(side, timed):
    if side in contexts:
      with stack.install(contexts[side]):
        start = time.perf_counter()
        outputs[side] = process.next(state, workload.client_data)
        return time.perf_counter() - start
    start = time.perf_counter()
    outputs[side], client_seconds = pure_tf_round(
        initial, workload.clients, loop=PURE_TF_SIDES[side])
    seconds = time.perf_counter() - start
    if timed:
      compute[side].append(sum(client_seconds))
    return seconds

  # Warm-up (tracing, compilation, the workers' first runs), then the check
  # that every side computed the same model.
  for side in SIDES:
    first[side] = run_side(side, timed=False)
  with stack.install(contexts[TFF]):
    weights = {side: process.get_model_weights(outputs[side].state).trainable
               for side in contexts}
  weights.update((side, outputs[side]) for side in PURE_TF_SIDES)
  differences = round_overhead_pure_tf.check_same_model(weights, initial,
                                                        reference=TFF)

  for repeat in range(repeats):
    # Rotating the order keeps drift (e.g. other processes on the machine)
    # from always hitting the same side first.
    for i in range(len(SIDES)):
      side = SIDES[(repeat + i) % len(SIDES)]
      times[side].append(run_side(side, timed=True))
    for name, value in _serialize(process, state, workload.client_data,
                                  outputs[TFF], computation).items():
      serialization[name].append(value)
  return dict(initial=initial, times=times, first=first, compute=compute,
              differences=differences, serialization=serialization)


def run_round_overhead(
    *,
    setup: round_overhead_workloads.Setup,
    data_dir: Optional[str],
    repeats: int,
    seed: int,
    context_settings: runtime.ContextSettings = runtime.ContextSettings(),
) -> collections.OrderedDict:
  """Times the sides interleaved; returns the measurements.

  Starts the TFF workers of two contexts (`context_settings`, and the same
  with `max_concurrent_computation_calls=1`) and stops them before
  returning. The pure-TF reference is the faster of the two `PureTfRound`
  loops (by median round time), so that a slow hand-written loop cannot
  flatter TFF; both are reported.

  Args:
    setup: The workload: an `R8Setup` or a `Text2SqlSetup`.
    data_dir: The `shared/data` folder; None finds it.
    repeats: Timed rounds of each side, after one warm-up round each.
    seed: Seed of the data and the model.
    context_settings: The first TFF side's context (its workers are started
      here; the second side's are the same with concurrency 1). With
      several workers, Lorar rounds still run whole on the first one (see
      `tff_nlp.runtime.multi_worker`).

  Returns:
    A JSON-serializable OrderedDict: the configuration, every side's round
    times, medians, the ratios TFF / pure TF, the breakdown, serialized
    bytes and the weight check. Field by field: see the code below and
    `markdown`.

  Raises:
    AssertionError: If the sides do not compute the same global model.
    ValueError: For `repeats < 1`, or remote workers in `context_settings`
      (their concurrency cannot be set from here).
  """
  if repeats < 1:
    raise ValueError(f'repeats must be >= 1, got {repeats}.')
  if context_settings.worker_addresses:
    raise ValueError(
        'The benchmark starts its own workers (one context with concurrency '
        '1); remote worker_addresses cannot be given a concurrency from '
        f'here: {list(context_settings.worker_addresses)}.')
  workload = round_overhead_workloads.build_workload(
      setup, data_dir=data_dir, seed=seed)
  process = workload.process
  # Built after the process: a Keras model built before TFF traces
  # `model_fn` fails when first called in a tf.function afterwards.
  start = time.perf_counter()
  pure_tf_round = round_overhead_pure_tf.PureTfRound(
      workload.model_fn, workload.client_optimizer)
  pure_tf_build_seconds = time.perf_counter() - start
  # As the contexts compile it on their first call; serialized below because
  # they send it with every call.
  start = time.perf_counter()
  computation = tff.backends.native.desugar_and_transform_to_native(
      process.next)
  compile_seconds = time.perf_counter() - start

  c1_settings = dataclasses.replace(
      context_settings, max_concurrent_computation_calls=1,
      # Both contexts name their worker logs by pid: keep them apart.
      log_dir=(os.path.join(context_settings.log_dir, 'concurrency_1')
               if context_settings.log_dir else None))
  # Both contexts' workers run for the whole measurement (a context's `with`
  # stops its workers on exit); each call installs its own context.
  with contextlib.ExitStack() as exit_stack:
    contexts = {
        side: exit_stack.enter_context(runtime.CppContext(settings))
        .tff_context
        for side, settings in ((TFF, context_settings), (TFF_C1, c1_settings))
    }
    measured = _measure(workload, pure_tf_round, contexts,
                        computation=computation, repeats=repeats)
  times, first, compute = (measured['times'], measured['first'],
                           measured['compute'])
  initial, differences = measured['initial'], measured['differences']

  medians = {side: statistics.median(t) for side, t in times.items()}
  reference = min(PURE_TF_SIDES, key=lambda side: medians[side])
  compute_medians = {side: statistics.median(c) for side, c in compute.items()}
  serialized = collections.OrderedDict(
      (name, collections.OrderedDict(
          seconds=statistics.median(seconds for seconds, _ in values),
          bytes=values[-1][1]))
      for name, values in measured['serialization'].items())
  serialization_seconds = sum(v['seconds'] for v in serialized.values())
  breakdown = collections.OrderedDict()
  for side in SIDES:
    serial = serialization_seconds if side in contexts else 0.0
    side_compute = compute_medians.get(side, compute_medians[reference])
    breakdown[side] = collections.OrderedDict(
        round_seconds=medians[side],
        first_round_seconds=first[side],
        tracing_seconds=first[side] - medians[side],
        serialization_seconds=serial,
        compute_seconds=side_compute,
        remainder_seconds=medians[side] - serial - side_compute,
    )
  clients = workload.clients
  return collections.OrderedDict(
      model=setup.name,
      num_clients=len(clients),
      client_names=[c.name for c in clients],
      client_train_examples=[c.train_examples for c in clients],
      client_local_epochs=[c.num_epochs for c in clients],
      client_batch_sizes=[c.batch_size for c in clients],
      client_learning_rates=[c.learning_rate for c in clients],
      # The most common values, for tables (r8: every client's).
      local_epochs=statistics.mode(c.num_epochs for c in clients),
      batch_size=statistics.mode(c.batch_size for c in clients),
      model_parameters=int(sum(np.size(w) for w in initial)),
      repeats=repeats,
      concurrency=_concurrency_label(
          context_settings.max_concurrent_computation_calls),
      num_workers=context_settings.num_workers,
      pure_tf_loop=PURE_TF_SIDES[reference],
      # Issue 2's fields (the pure-TF side is the reference loop's).
      tff_round_seconds=times[TFF],
      pure_tf_round_seconds=times[reference],
      tff_median_seconds=medians[TFF],
      pure_tf_median_seconds=medians[reference],
      ratio=medians[TFF] / medians[reference],
      tff_c1_round_seconds=times[TFF_C1],
      tff_c1_median_seconds=medians[TFF_C1],
      ratio_c1=medians[TFF_C1] / medians[reference],
      target_ratio=TARGET_RATIO,
      round_seconds=times,
      median_seconds=medians,
      first_round_seconds=first,
      client_compute_seconds=compute,
      max_abs_weight_difference=max(
          differences[side]['max_abs'] for side in SIDES[1:]),
      relative_weight_difference=max(
          differences[side]['relative'] for side in SIDES[1:]),
      weight_differences=collections.OrderedDict(
          (side, differences[side]) for side in SIDES[1:]),
      max_abs_update=differences['max_abs_update'],
      update_norm=differences['update_norm'],
      prepare_seconds=workload.prepare_seconds,
      build_seconds=collections.OrderedDict(
          tff=workload.build_seconds, tff_compile=compile_seconds,
          pure_tf=pure_tf_build_seconds),
      serialization=serialized,
      serialization_seconds=serialization_seconds,
      breakdown=breakdown,
      machine=training_lib.machine_info(),
  )


def _side_label(result: Mapping[str, Any], side: str) -> str:
  if side == TFF:
    return f'TFF, concurrency {result["concurrency"]}'
  if side == TFF_C1:
    return 'TFF, concurrency 1'
  reference = ' (reference)' if PURE_TF_SIDES[side] == result[
      'pure_tf_loop'] else ''
  return f'pure TF, {PURE_TF_SIDES[side]}{reference}'


def markdown(result: Mapping[str, Any]) -> str:
  """The result as Markdown: round times, where the time goes, bytes."""
  breakdown = result['breakdown']
  n = result['repeats']
  reference = f'pure_tf_{result["pure_tf_loop"]}'
  other = next(s for s in PURE_TF_SIDES if s != reference)

  fewest, most = (min(result['client_local_epochs']),
                  max(result['client_local_epochs']))
  epochs = str(fewest) if fewest == most else f'{fewest}-{most}'

  def ratio_row(side, concurrency, ratio):
    return (f'| {result["model"]} | {result["num_clients"]} '
            f'| {sum(result["client_train_examples"]):,} '
            f'| {epochs} | {result["model_parameters"]:,} '
            f'| {concurrency} | {result["median_seconds"][side]:.3f} '
            f'| {result["pure_tf_median_seconds"]:.3f} | {ratio:.3f} |')

  def part_row(label, how, key):
    cells = ' | '.join(f'{breakdown[s][key]:.3f}' for s in SIDES)
    return f'| {label} | {how} | {cells} |'

  build = result['build_seconds']
  serialization = result['serialization']
  return '\n'.join([
      '| model | clients | examples | epochs | parameters | TFF concurrency '
      '| TFF round (s) | pure TF (s) | ratio |',
      '|---|---|---|---|---|---|---|---|---|',
      ratio_row(TFF, result['concurrency'], result['ratio']),
      ratio_row(TFF_C1, 1, result['ratio_c1']),
      '',
      f'Medians of {n} interleaved rounds per side after one warm-up each '
      f'(target ratio <= {result["target_ratio"]}). Pure TF: the '
      f'{result["pure_tf_loop"]} loop, the faster of the two (the '
      f'{PURE_TF_SIDES[other]} loop: {result["median_seconds"][other]:.3f} '
      's). Every side computed the global model of TFF (concurrency '
      f'{result["concurrency"]}) to ||difference|| <= '
      f'{result["relative_weight_difference"]:.1e} x ||update|| (max '
      f'|difference| {result["max_abs_weight_difference"]:.1e}, max |update| '
      f'{result["max_abs_update"]:.1e}; floating-point noise, amplified by '
      'training).',
      '',
      '| seconds | how it was obtained | '
      + ' | '.join(_side_label(result, s) for s in SIDES) + ' |',
      '|---|---|' + '---|' * len(SIDES),
      part_row('round', f'median of {n} timed rounds', 'round_seconds'),
      part_row('serialization', 'serialize_value of state, client data, '
               'computation and result (table below)',
               'serialization_seconds'),
      part_row('compute', 'pure-TF per-client training, summed over '
               'clients, median over timed rounds (TFF: the reference '
               "loop's)", 'compute_seconds'),
      part_row('remainder', 'round - serialization - compute; TFF: '
               'runtime (scheduling, gRPC, deserialization) and any '
               'difference in client speed, negative if it overlaps '
               'clients; pure TF: server step', 'remainder_seconds'),
      part_row('first round', 'the warm-up round', 'first_round_seconds'),
      part_row('tracing, compilation', 'first round - steady round',
               'tracing_seconds'),
      '',
      f'Once, before the rounds: building the TFF process (Python tracing of '
      f'its computations) {build["tff"]:.2f} s, compiling its round to '
      f'the native form {build["tff_compile"]:.2f} s (each context does '
      f'this again in its first round), building the pure-TF Keras model '
      f'{build["pure_tf"]:.2f} s (its tf.functions are traced in its first '
      'round).',
      '',
      '| serialized per round | bytes | serialize_value (ms) |',
      '|---|---|---|',
      *(f'| {name} | {serialization[name]["bytes"]:,} '
        f'| {1000 * serialization[name]["seconds"]:.1f} |'
        for name in serialization),
      '',
      'Python-side `tff.framework.serialize_value`, median of one call per '
      'repeat. The context serializes state, client data (the datasets\' '
      'graphs, with their examples) and the compiled computation on every '
      'call; the result is serialized by the worker in C++, so its time here '
      'is an estimate.',
  ])
