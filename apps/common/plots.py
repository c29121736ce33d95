"""Figures of federated runs, drawn from their `metrics.jsonl` records.

*   `plot_client_training_loss`: each client's training loss against its
    cumulative local steps across rounds, one panel per run (the per-client
    curves of the Lorar paper).
*   `plot_metric_by_round`: one metric against rounds for several runs on one
    axis (e.g. MacroAvg accuracy per weighting).
*   `plot_client_weight_shares`: each client's share of the round's weight
    (`client_weight_shares`, e.g. Lorar's |D_i|·ΔL_i normalised) against
    rounds, beside its `num_examples` share |D_i| / Σ|D_j|.
*   `plot_intervals`: one row per method with its mean, 95 % interval and
    per-seed values (e.g. BLEU of each NMT engine), optionally beside a
    reference value (the paper's).

The figures are drawn on Agg canvases of their own, not with pyplot: no
global backend is chosen or changed and no display is needed.
"""

from collections.abc import Mapping, Sequence
from typing import Any, Optional

from matplotlib import figure
from matplotlib import ticker
from matplotlib.backends import backend_agg
import numpy as np

# (x values, y values) of one curve.
Series = tuple[list[float], list[float]]


def lookup(record: Mapping[str, Any], metric: str) -> Any:
  """`record['a']['b']` for `metric='a/b'`; KeyError if absent.

  Metric names may hold '/' themselves (TFF's and ours do, e.g. the flat key
  `'dev_bleu/avg'` of `record['eval']`): at each level the longest run of
  the remaining parts that is a key is taken, so `'eval/dev_bleu/avg'`
  finds `record['eval']['dev_bleu/avg']` as well as
  `record['eval']['dev_bleu']['avg']`.
  """
  parts = metric.split('/')
  value = record
  while parts:
    if not isinstance(value, Mapping):
      raise KeyError(metric)
    for end in range(len(parts), 0, -1):
      key = '/'.join(parts[:end])
      if key in value:
        value, parts = value[key], parts[end:]
        break
    else:
      raise KeyError(metric)
  return value


def metric_series(records: Sequence[Mapping[str, Any]], metric: str) -> Series:
  """(rounds, values) of `metric` over the records that have it.

  Args:
    records: Per-round records (`tff_nlp.training.read_json_lines`).
    metric: A '/'-separated path into a record, e.g. 'eval/macro_avg'.

  Returns:
    The rounds and float values, in record order; non-finite values (stored
    as strings in JSON) become NaN.
  """
  rounds, values = [], []
  for record in records:
    try:
      value = lookup(record, metric)
    except (KeyError, TypeError):
      continue
    rounds.append(record['round'])
    values.append(float(value))
  return rounds, values


def client_loss_series(
    records: Sequence[Mapping[str, Any]],
    *,
    loss_key: str = 'mean_batch_loss',
    steps_key: str = 'num_batches',
) -> dict[int, Series]:
  """Each client's round loss against its cumulative local steps.

  Args:
    records: Per-round records with `client_ids` and `client_outputs` (as
      written by `tff_nlp.training.run_training` for an `FLProcess`).
    loss_key: The per-client output holding the round's training loss.
    steps_key: The per-client output holding the round's local steps.

  Returns:
    `{client_id: (cumulative steps at the end of each round it took part in,
    its loss in that round)}`; clients that trained no step in a round (e.g.
    empty) get no point for it.
  """
  series: dict[int, Series] = {}
  steps_so_far: dict[int, float] = {}
  for record in records:
    for client_id, output in zip(record.get('client_ids', ()),
                                 record.get('client_outputs', ())):
      steps = float(output[steps_key])
      if steps <= 0:
        continue
      steps_so_far[client_id] = steps_so_far.get(client_id, 0.0) + steps
      xs, ys = series.setdefault(client_id, ([], []))
      xs.append(steps_so_far[client_id])
      ys.append(float(output[loss_key]))
  return dict(sorted(series.items()))


def client_batch_loss_series(
    records: Sequence[Mapping[str, Any]],
) -> dict[int, Series]:
  """Each client's training loss at every local step (the paper's Figs 3-5).

  Args:
    records: Per-round records with `client_ids` and `client_outputs`
      holding `batch_losses` (every batch's loss, in order; as written by
      `tff_nlp.training.run_training` for an `FLProcess`).

  Returns:
    `{client_id: (local steps 1, 2, ... counted over all its rounds, the
    loss of each step's batch)}`. Rounds recorded without `batch_losses`
    (by an older version) count their `num_batches` steps and add no point.
  """
  series: dict[int, Series] = {}
  steps_so_far: dict[int, int] = {}
  for record in records:
    for client_id, output in zip(record.get('client_ids', ()),
                                 record.get('client_outputs', ())):
      losses = output.get('batch_losses')
      first = steps_so_far.get(client_id, 0)
      if losses is None:
        steps_so_far[client_id] = first + int(float(output['num_batches']))
        continue
      xs, ys = series.setdefault(client_id, ([], []))
      xs.extend(range(first + 1, first + len(losses) + 1))
      ys.extend(float(loss) for loss in losses)
      steps_so_far[client_id] = first + len(losses)
  return dict(sorted(series.items()))


def client_weight_shares(
    records: Sequence[Mapping[str, Any]],
) -> tuple[dict[int, Series], dict[int, float]]:
  """Each client's normalised weight per round, and its |D_i| share.

  The weight a round applied: the clients' `candidate_weight` over their
  sum, or, in a round where that sum is 0 (every ΔL 0: the fallback),
  `fallback_weight` over its sum.

  Args:
    records: Per-round records with `client_ids` and `client_outputs`.

  Returns:
    `({client_id: (rounds, shares)}, {client_id: dataset_size share})`, the
    second from the last round each client took part in.
  """
  shares: dict[int, Series] = {}
  sizes: dict[int, float] = {}
  for record in records:
    ids = record.get('client_ids', ())
    outputs = record.get('client_outputs', ())
    if not outputs:
      continue
    if all('weight' in o for o in outputs):  # The weight the round applied.
      weights = [float(o['weight']) for o in outputs]
    else:
      weights = [float(o['candidate_weight']) for o in outputs]
      if not sum(weights) > 0:
        weights = [float(o['fallback_weight']) for o in outputs]
    total = sum(weights)
    size_total = sum(float(o['dataset_size']) for o in outputs)
    for client_id, output, weight in zip(ids, outputs, weights):
      xs, ys = shares.setdefault(client_id, ([], []))
      xs.append(record['round'])
      ys.append(weight / total if total > 0 else 0.0)
      if size_total > 0:
        sizes[client_id] = float(output['dataset_size']) / size_total
  return dict(sorted(shares.items())), dict(sorted(sizes.items()))


def plot_client_weight_shares(
    panels: Mapping[str, tuple[Mapping[str, Series], Mapping[str, float]]],
    path: str,
) -> None:
  """Saves per-client weight shares against rounds as a PNG, a panel a run.

  Args:
    panels: `{panel title: ({client: (rounds, shares)}, {client: |D_i|
      share})}`, e.g. `client_weight_shares` with client names. Each
      client's share is a solid line, its |D_i| share a dashed one of the
      same colour.
    path: The PNG file to write.
  """
  if not panels:
    raise ValueError('Nothing to plot: panels is empty.')
  ncols = min(2, len(panels))
  nrows = -(-len(panels) // ncols)
  fig, axes = _new_figure(nrows, ncols, width=5.5, height=3.8, sharey=True)
  for ax, (title, (curves, sizes)) in zip(axes.flat, panels.items()):
    for label, (xs, ys) in curves.items():
      line, = ax.plot(xs, ys, marker='.', label=label)
      if label in sizes:
        ax.axhline(sizes[label], color=line.get_color(), linestyle='--',
                   linewidth=0.8)
    ax.set_title(title)
    ax.set_xlabel('round')
    ax.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))
    ax.set_ylabel('share of the round\'s weight')
    ax.set_yscale('log')
    ax.grid(alpha=0.3)
  for ax in axes.flat[len(panels):]:
    ax.set_visible(False)
  axes.flat[0].legend(title='client (dashed: |D_i| share)',
                      fontsize='small')
  fig.savefig(path, dpi=110)


def _new_figure(nrows: int, ncols: int, *, width: float, height: float,
                **subplot_kwargs):
  fig = figure.Figure(figsize=(width * ncols, height * nrows),
                      layout='constrained')
  backend_agg.FigureCanvasAgg(fig)
  return fig, fig.subplots(nrows, ncols, squeeze=False, **subplot_kwargs)


def plot_client_training_loss(
    panels: Mapping[str, Mapping[str, Series]],
    path: str,
    *,
    x_label: str = 'local step',
    y_label: str = 'training loss',
    legend_title: Optional[str] = 'client',
    marker: Optional[str] = '.',
) -> None:
  """Saves per-client loss curves as a PNG, one panel per run.

  Args:
    panels: `{panel title: {curve label: (steps, losses)}}`, e.g. one panel
      per weighting with `client_loss_series` per client.
    path: The PNG file to write.
    x_label: Label of the x axis.
    y_label: Label of the y axis.
    legend_title: Title of the legend (shown on the first panel).
    marker: The points' marker (None: lines only, for per-batch curves).
  """
  if not panels:
    raise ValueError('Nothing to plot: panels is empty.')
  ncols = min(2, len(panels))
  nrows = -(-len(panels) // ncols)
  fig, axes = _new_figure(nrows, ncols, width=5.5, height=3.8, sharey=True)
  for ax, (title, curves) in zip(axes.flat, panels.items()):
    for label, (xs, ys) in curves.items():
      ax.plot(xs, ys, marker=marker, label=label,
              linewidth=1.0 if marker is None else 1.5)
    ax.set_title(title)
    ax.set_xlabel(x_label)
    ax.set_ylabel(y_label)
    ax.grid(alpha=0.3)
  for ax in axes.flat[len(panels):]:
    ax.set_visible(False)
  axes.flat[0].legend(title=legend_title, fontsize='small')
  fig.savefig(path, dpi=110)


def plot_metric_by_round(
    runs: Mapping[str, Series],
    path: str,
    *,
    y_label: str,
    title: Optional[str] = None,
) -> None:
  """Saves one metric against rounds for several runs on one axis (PNG).

  Args:
    runs: `{run label: (rounds, values)}`, e.g. from `metric_series`.
    path: The PNG file to write.
    y_label: What the metric is.
    title: Figure title.
  """
  if not runs:
    raise ValueError('Nothing to plot: runs is empty.')
  fig, axes = _new_figure(1, 1, width=6.5, height=4.0)
  ax = axes[0, 0]
  for label, (rounds, values) in runs.items():
    ax.plot(rounds, np.asarray(values, float), marker='.', label=label)
  ax.set_xlabel('round')
  ax.xaxis.set_major_locator(ticker.MaxNLocator(integer=True))
  ax.set_ylabel(y_label)
  if title:
    ax.set_title(title)
  ax.grid(alpha=0.3)
  ax.legend(fontsize='small')
  fig.savefig(path, dpi=110)


def plot_intervals(
    rows: Mapping[str, tuple[float, Optional[Sequence[float]],
                             Sequence[float]]],
    path: str,
    *,
    x_label: str,
    title: Optional[str] = None,
    reference: Optional[Mapping[str, float]] = None,
    reference_label: str = 'paper',
) -> None:
  """Saves one row per method: its mean, 95 % interval and per-seed values.

  Args:
    rows: `{label: (mean, [low, high] or None, per-seed values)}`, drawn top
      to bottom in order: the mean as a bar end, the interval as an error
      bar, each seed as a dot.
    path: The PNG file to write.
    x_label: What the values are.
    title: Figure title.
    reference: `{label: value}` drawn as open diamonds (e.g. the paper's
      numbers), for the labels that have one.
    reference_label: The legend's name of `reference`.
  """
  if not rows:
    raise ValueError('Nothing to plot: rows is empty.')
  # Wide enough for the longest label beside a readable axis.
  width = max(7.0, 4.0 + 0.07 * max(len(label) for label in rows))
  fig, axes = _new_figure(1, 1, width=width, height=0.45 * len(rows) + 1.2)
  ax = axes[0, 0]
  labels = list(rows)
  ys = np.arange(len(labels))[::-1]
  for y, label in zip(ys, labels):
    mean, interval, seeds = rows[label]
    ax.barh(y, mean, color='#9ecae1', height=0.6)
    if interval is not None:
      ax.errorbar(mean, y, xerr=[[mean - interval[0]], [interval[1] - mean]],
                  color='black', capsize=4, linewidth=1.2)
    ax.plot(list(seeds), [y] * len(seeds), 'o', color='#08519c',
            markersize=4, label='seed' if y == ys[0] else None)
    if reference and label in reference:
      ax.plot(reference[label], y, 'D', markerfacecolor='none',
              color='#d94801',
              label=reference_label if not ax.get_legend_handles_labels()[
                  1].count(reference_label) else None)
  ax.set_yticks(ys, labels)
  ax.set_xlabel(x_label)
  if title:
    ax.set_title(title)
  ax.grid(axis='x', alpha=0.3)
  ax.legend(fontsize='small', loc='lower right')
  fig.savefig(path, dpi=110)
