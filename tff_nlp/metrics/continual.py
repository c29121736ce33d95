"""Continual-learning evaluation: macro-F1, accuracy matrices, result tables.

For federated continual learning (FedWeIT / FedSeIT, spec
../shared/docs/fedseit_spec.md §8). A client learns tasks 0..T-1 in order;
its accuracy matrix is

    acc[i, j] = test accuracy on task j after learning task i,  j <= i,

(NaN for j > i, tasks not learned yet; entries above the diagonal are never
read), each task scored with its own head. From it:

*   `average_accuracy`: ACC = (1/T) Σ_j acc[T-1, j], the mean final accuracy
    over the learned tasks (the paper's headline number, which already
    includes forgetting).
*   `forgetting`: F = 1/(T-1) Σ_{j<T-1} (max_{j<=i<T-1} acc[i, j]
    - acc[T-1, j]), the drop from the best earlier accuracy (Chaudhry et
    al., Riemannian Walk for Incremental Learning, ECCV 2018). Negative when
    a task ends above its best earlier accuracy.
*   `backward_transfer`: BWT = 1/(T-1) Σ_{j<T-1} (acc[T-1, j] - acc[j, j])
    (Lopez-Paz & Ranzato, Gradient Episodic Memory, NeurIPS 2017); negative
    BWT is forgetting.

With a single task there is nothing to forget: F = BWT = 0. `summary` gives
the three for one client's matrix or the mean over several clients'.

`macro_f1` is the macro-averaged F1 of one task's predictions;
`heatmap_png` draws a matrix (e.g. acc, or task x round accuracy) as an
annotated heatmap; `results_table_markdown` lays out a methods x datasets
table (spec §8) with each proposed method's average gain over the baselines
beside the paper's +12.4 % (abstract).
"""

import collections
from collections.abc import Mapping, Sequence
import math
import numbers
from typing import NamedTuple, Optional

from typing import TYPE_CHECKING

import numpy as np

from tff_nlp.metrics import intervals

if TYPE_CHECKING:
  from matplotlib import figure  # pylint: disable=g-import-not-at-top

# A cell without a number.
MISSING = '–'
# Marks an average over fewer than all datasets.
PARTIAL_MARK = '*'
AVERAGE_COLUMN = 'Avg'
# Baseline rows of the spec §8 table, matched case-insensitively.
BASELINES = ('local', 'fedavg', 'fedprox', 'fedweit')


def macro_f1(labels: Sequence[int], predictions: Sequence[int],
             num_classes: int) -> float:
  """The unweighted mean over classes of the per-class F1.

  F1_c = 2 TP_c / (2 TP_c + FP_c + FN_c). A class absent from both the
  labels and the predictions (TP + FP + FN = 0, F1 undefined) is excluded
  from the mean; a class that is predicted but never right, or present but
  never predicted, counts with F1 0. This is scikit-learn's
  `f1_score(labels, predictions, average='macro')`, which averages over the
  classes found in either.

  Args:
    labels: int[N] true classes in [0, num_classes).
    predictions: int[N] predicted classes in [0, num_classes).
    num_classes: The task's classes.

  Returns:
    Macro-F1 in [0, 1].

  Raises:
    ValueError: If the lengths differ, N is 0, or a class is out of range.
  """
  labels = np.asarray(labels)
  predictions = np.asarray(predictions)
  if labels.ndim != 1 or labels.shape != predictions.shape or not labels.size:
    raise ValueError(
        f'labels and predictions must be non-empty and of one length; got '
        f'shapes {labels.shape} and {predictions.shape}.')
  for name, values in (('labels', labels), ('predictions', predictions)):
    if (not np.issubdtype(values.dtype, np.integer) or values.min() < 0
        or values.max() >= num_classes):
      raise ValueError(
          f'{name} must be integers in [0, {num_classes}), got {values}.')
  right = labels == predictions
  tp = np.bincount(labels[right], minlength=num_classes)
  fn = np.bincount(labels[~right], minlength=num_classes)
  fp = np.bincount(predictions[~right], minlength=num_classes)
  present = tp + fp + fn > 0
  f1 = 2.0 * tp[present] / (2.0 * tp[present] + fp[present] + fn[present])
  return float(np.mean(f1))


def _check_matrix(acc) -> np.ndarray:
  acc = np.asarray(acc, np.float64)
  if acc.ndim != 2 or acc.shape[0] != acc.shape[1] or not acc.shape[0]:
    raise ValueError(
        f'An accuracy matrix must be [T, T] with T >= 1, got shape '
        f'{acc.shape}.')
  lower = acc[np.tril_indices(acc.shape[0])]
  if not np.all(np.isfinite(lower)):
    raise ValueError(
        'acc[i, j] must be finite for every j <= i (the tasks learned by '
        f'then); got\n{acc}')
  return acc


def average_accuracy(acc) -> float:
  """ACC: mean of the last row over the T learned tasks (module docstring)."""
  acc = _check_matrix(acc)
  return float(np.mean(acc[-1]))


def forgetting(acc) -> float:
  """F: mean drop from each earlier task's best accuracy (Chaudhry 2018).

  Args:
    acc: [T, T] accuracy matrix (module docstring).

  Returns:
    1/(T-1) Σ_{j<T-1} (max_{j<=i<T-1} acc[i, j] - acc[T-1, j]); 0 for T = 1.
  """
  acc = _check_matrix(acc)
  last = acc.shape[0] - 1
  if not last:
    return 0.0
  drops = [np.max(acc[j:last, j]) - acc[last, j] for j in range(last)]
  return float(np.mean(drops))


def backward_transfer(acc) -> float:
  """BWT: mean change of each earlier task since it was learned (GEM 2017).

  Args:
    acc: [T, T] accuracy matrix (module docstring).

  Returns:
    1/(T-1) Σ_{j<T-1} (acc[T-1, j] - acc[j, j]); 0 for T = 1.
  """
  acc = _check_matrix(acc)
  last = acc.shape[0] - 1
  if not last:
    return 0.0
  return float(np.mean(acc[last, :last] - np.diag(acc)[:last]))


def summary(acc) -> collections.OrderedDict:
  """ACC, F and BWT of one [T, T] matrix, or their means over [C, T, T].

  The mean over C clients' matrices (each client with its own T tasks, as in
  the spec's setting) of ACC equals the mean final accuracy over all C·T
  (client, task) pairs, the paper's headline number.
  """
  acc = np.asarray(acc, np.float64)
  matrices = [acc] if acc.ndim == 2 else list(acc)
  if acc.ndim not in (2, 3) or not matrices:
    raise ValueError(f'Expected [T, T] or [C, T, T], got shape {acc.shape}.')
  return collections.OrderedDict(
      (fn.__name__, float(np.mean([fn(m) for m in matrices])))
      for fn in (average_accuracy, forgetting, backward_transfer))


def final_accuracies(acc) -> np.ndarray:
  """The final accuracy of every (client, task) pair: acc[c, T-1, j] of a
  [C, T, T] matrix, flattened client by client to [C·T]."""
  acc = np.asarray(acc, np.float64)
  if acc.ndim != 3:
    raise ValueError(f'Expected [C, T, T], got shape {acc.shape}.')
  return acc[:, -1, :].reshape(-1)


def pair_bootstrap_difference(a, b, *, num_replicates: int = 2000,
                              confidence: float = 0.95,
                              seed: int = 0) -> intervals.Interval:
  """Paired bootstrap over (client, task) pairs of mean(A) - mean(B).

  `a[s, p]` and `b[s, p]` are the final accuracies of pair p in seed s of
  methods A and B, which saw the same tasks in each seed (the pairs of
  different seeds may be different tasks). The estimate is the mean over
  seeds and pairs of a - b. Each replicate draws, for every seed
  independently, P pairs with replacement from its P pairs, the same for A
  and B (paired, so what the two methods share about a task cancels), and
  takes the mean difference over the draws; the interval is the replicates'
  percentile interval. It covers the sampling of tasks and clients, for
  these trained runs; `intervals.seed_interval` of the per-seed differences
  covers the seeds. E.g. a - b = [[0.1, 0.3]] (one seed, two pairs): the
  replicates are 0.1, 0.2 or 0.3 with probabilities 1/4, 1/2, 1/4.

  Args:
    a: [S, P] final accuracies of method A.
    b: [S, P] of method B, the same pairs.
    num_replicates: Bootstrap replicates.
    confidence: Coverage in (0, 1).
    seed: Seed of `np.random.default_rng`.

  Returns:
    `intervals.Interval(estimate, low, high)`.

  Raises:
    ValueError: If the shapes differ or are not [S, P] with S, P >= 1, or
      a value is not finite.
  """
  a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
  if a.shape != b.shape or a.ndim != 2 or 0 in a.shape:
    raise ValueError(f'a and b must both be [seeds, pairs] with at least one '
                     f'of each, got {a.shape} and {b.shape}.')
  if not (np.all(np.isfinite(a)) and np.all(np.isfinite(b))):
    raise ValueError('a and b must be finite.')
  if not 0 < confidence < 1:
    raise ValueError(f'confidence must be in (0, 1), got {confidence}.')
  difference = a - b
  num_seeds, num_pairs = difference.shape
  draws = np.random.default_rng(seed).integers(
      0, num_pairs, size=(num_replicates, num_seeds, num_pairs))
  replicates = np.mean(
      difference[np.arange(num_seeds)[None, :, None], draws], axis=(1, 2))
  tail = 100 * (1 - confidence) / 2
  low, high = np.percentile(replicates, [tail, 100 - tail])
  return intervals.Interval(float(np.mean(difference)), float(low),
                            float(high))


def heatmap_png(matrix,
                path: str,
                title: Optional[str] = None,
                row_labels: Optional[Sequence[str]] = None,
                col_labels: Optional[Sequence[str]] = None,
                *,
                x_label: Optional[str] = 'evaluated task',
                y_label: Optional[str] = 'after task',
                fmt: str = '.2f',
                vmin: Optional[float] = None,
                vmax: Optional[float] = None,
                cmap: str = 'viridis') -> 'figure.Figure':
  """Saves a matrix as an annotated heatmap (PNG).

  Each finite cell shows its value (`fmt`); NaN cells (e.g. tasks not yet
  learned) are left blank, without colour or text. Drawn on an Agg canvas of
  its own, as in `apps.common.plots` (no pyplot, no global backend).

  Args:
    matrix: float[rows, columns], e.g. an accuracy matrix or a task x round
      accuracy matrix.
    path: The PNG file to write.
    title: Figure title.
    row_labels: One label per row (default 0, 1, ...).
    col_labels: One label per column (default 0, 1, ...).
    x_label: Label of the columns' axis.
    y_label: Label of the rows' axis.
    fmt: Format of the annotations.
    vmin: Lower end of the colour scale (default: the smallest value).
    vmax: Upper end of the colour scale (default: the largest value).
    cmap: A matplotlib colour map name.

  Returns:
    The figure (e.g. to inspect its annotations).

  Raises:
    ValueError: If the matrix is not 2-D or non-empty, or a label list has
      the wrong length.
  """
  values = np.asarray(matrix, np.float64)
  if values.ndim != 2 or not values.size:
    raise ValueError(f'matrix must be 2-D and non-empty, got {values.shape}.')
  rows, columns = values.shape
  row_labels = [str(i) for i in range(rows)] if row_labels is None else list(
      row_labels)
  col_labels = [str(j) for j in range(columns)] if col_labels is None else (
      list(col_labels))
  if len(row_labels) != rows or len(col_labels) != columns:
    raise ValueError(
        f'{len(row_labels)} row and {len(col_labels)} column labels for a '
        f'{rows} x {columns} matrix.')
  # Imported here: the metrics (and `import tff_nlp`) do not need
  # matplotlib, which takes a second to import.
  import matplotlib  # pylint: disable=g-import-not-at-top
  from matplotlib import figure  # pylint: disable=g-import-not-at-top,redefined-outer-name
  from matplotlib.backends import backend_agg  # pylint: disable=g-import-not-at-top
  fig = figure.Figure(
      figsize=(max(4.0, 1.5 + 0.7 * columns), max(3.0, 1.2 + 0.5 * rows)),
      layout='constrained')
  backend_agg.FigureCanvasAgg(fig)
  ax = fig.subplots()
  masked = np.ma.masked_invalid(values)
  colour_map = matplotlib.colormaps[cmap].with_extremes(bad=(0, 0, 0, 0))
  finite = values[np.isfinite(values)]
  low = vmin if vmin is not None else (finite.min() if finite.size else 0.0)
  high = vmax if vmax is not None else (finite.max() if finite.size else 1.0)
  image = ax.imshow(masked, cmap=colour_map, vmin=low, vmax=high,
                    aspect='auto')
  fig.colorbar(image, ax=ax)
  middle = (low + high) / 2.0
  for i in range(rows):
    for j in range(columns):
      if np.isfinite(values[i, j]):
        ax.text(j, i, format(values[i, j], fmt), ha='center', va='center',
                fontsize='small',
                color='black' if values[i, j] >= middle else 'white')
  ax.set_xticks(range(columns), col_labels)
  ax.set_yticks(range(rows), row_labels)
  if x_label:
    ax.set_xlabel(x_label)
  if y_label:
    ax.set_ylabel(y_label)
  if title:
    ax.set_title(title)
  fig.savefig(path, dpi=110)
  return fig


class Gain(NamedTuple):
  """A method's average gain over baselines (`average_gain`).

  Attributes:
    relative: Mean over baselines of the relative gain, in percent.
    points: Mean over baselines of the absolute difference of averages, in
      the results' unit (percentage points for accuracies in percent).
    baselines: The baseline rows used, in table order.
  """

  relative: float
  points: float
  baselines: tuple[str, ...]


def _check_results(results: Mapping[str, Mapping[str, float]]) -> None:
  if not results:
    raise ValueError('results is empty.')
  for method, row in results.items():
    for dataset, value in row.items():
      if (isinstance(value, bool) or not isinstance(value, numbers.Real)
          or not math.isfinite(value)):
        raise ValueError(
            f'results[{method!r}][{dataset!r}] = {value!r} is not a finite '
            f'number.')


def _baseline_rows(results, baselines: Sequence[str]) -> list[str]:
  wanted = {b.casefold() for b in baselines}
  return [m for m in results if m.casefold() in wanted]


def average_gain(results: Mapping[str, Mapping[str, float]], method: str,
                 baselines: Sequence[str] = BASELINES) -> Optional[Gain]:
  """The average gain of `method` over the baseline rows present.

  For each baseline row b (the rows of `results` whose name is one of
  `baselines`, case-insensitively) that shares at least one dataset with
  `method`, over those shared datasets D_b:

      A_m = mean_{d in D_b} results[method][d],
      A_b = mean_{d in D_b} results[b][d],
      relative_b = 100 · (A_m - A_b) / A_b,     points_b = A_m - A_b.

  With complete rows A_m and A_b are the rows' Avg. The gain is the mean of
  relative_b (and of points_b) over those baselines: the relative gain of the
  method's Avg over each baseline's Avg, averaged over baselines (not the
  gain over the baselines' mean Avg).

  Args:
    results: Numbers by method, then by dataset.
    method: The row whose gain is computed.
    baselines: Names of the baseline rows (case-insensitive); `method`
      itself is never its own baseline.

  Returns:
    The `Gain`, or None if no baseline row shares a dataset with `method`.

  Raises:
    ValueError: If a baseline's A_b is 0 (no relative gain), or `method` or a
      value is missing or invalid.
  """
  _check_results(results)
  if method not in results:
    raise ValueError(f'No row {method!r} in results ({list(results)}).')
  relative, points, used = [], [], []
  for baseline in _baseline_rows(results, baselines):
    if baseline == method:
      continue
    shared = [d for d in results[method] if d in results[baseline]]
    if not shared:
      continue
    ours = np.mean([results[method][d] for d in shared])
    theirs = np.mean([results[baseline][d] for d in shared])
    if theirs == 0:
      raise ValueError(
          f'Baseline {baseline!r} averages 0 on {shared}: no relative gain.')
    relative.append(100.0 * (ours - theirs) / theirs)
    points.append(ours - theirs)
    used.append(baseline)
  if not used:
    return None
  return Gain(relative=float(np.mean(relative)), points=float(np.mean(points)),
              baselines=tuple(used))


def _escape(label: str) -> str:
  return str(label).replace('|', r'\|')


def results_table_markdown(
    results: Mapping[str, Mapping[str, float]],
    paper_average_gain: Optional[float] = 12.4,
    *,
    datasets: Optional[Sequence[str]] = None,
    baselines: Sequence[str] = BASELINES,
    proposed: Optional[Sequence[str]] = None,
) -> str:
  """A methods x datasets Markdown table with the average gain line.

  One row per method of `results`, in order (e.g. 'Local', 'FedAvg',
  'FedProx', 'FedWeIT', 'FedSeIT', 'FedSeIT + SIT (K=3)'), the datasets as
  columns and an 'Avg' column: the mean of the row's datasets, marked with
  `PARTIAL_MARK` if over fewer than all columns. Numbers have two decimals;
  a missing cell shows `MISSING`.

  Under the table, one line gives each proposed method's `average_gain` over
  the baseline rows present: the relative gain of its Avg over each
  baseline's Avg, in percent, averaged over baselines (on the datasets both
  rows have), with the mean difference in points in brackets; then the
  paper's reported average gain (+12.4 % in the abstract, for FedSeIT over
  its baselines), if given.

  Args:
    results: Our numbers by method, then by dataset.
    paper_average_gain: The paper's average gain in percent, or None.
    datasets: The columns in order (default: every dataset of `results`, in
      order of first appearance). A row's dataset not among them is an error.
    baselines: Names of the baseline rows (case-insensitive).
    proposed: The rows whose gain is reported (default: every row that is
      not a baseline).

  Returns:
    The table and the gain line, without a trailing newline.

  Raises:
    ValueError: For empty results, a non-finite value, a dataset not in
      `datasets`, or a `proposed` row not in `results`.
  """
  _check_results(results)
  if datasets is None:
    datasets = list(dict.fromkeys(d for row in results.values() for d in row))
  datasets = list(datasets)
  if not datasets or len(set(datasets)) != len(datasets):
    raise ValueError(f'datasets={datasets!r}: expected distinct names.')
  for method, row in results.items():
    unknown = [d for d in row if d not in datasets]
    if unknown:
      raise ValueError(
          f'Row {method!r} has datasets {unknown} not in {datasets}.')
  baseline_rows = _baseline_rows(results, baselines)
  if proposed is None:
    proposed = [m for m in results if m not in baseline_rows]
  missing = [m for m in proposed if m not in results]
  if missing:
    raise ValueError(f'proposed rows {missing} are not in results.')

  header = ['Model', *datasets, AVERAGE_COLUMN]
  lines = ['| ' + ' | '.join(_escape(h) for h in header) + ' |',
           '|---|' + '---:|' * (len(header) - 1)]
  for method, row in results.items():
    cells = [f'{row[d]:.2f}' if d in row else MISSING for d in datasets]
    present = [row[d] for d in datasets if d in row]
    if present:
      mark = '' if len(present) == len(datasets) else PARTIAL_MARK
      cells.append(f'{np.mean(present):.2f}{mark}')
    else:
      cells.append(MISSING)
    lines.append('| ' + ' | '.join([_escape(method), *cells]) + ' |')

  gains = []
  for method in proposed:
    gain = average_gain(results, method, baselines)
    if gain is None:
      gains.append(f'{method} {MISSING}')
    else:
      gains.append(f'{method} {gain.relative:+.2f} % ({gain.points:+.2f} '
                   'points)')
  names = ', '.join(baseline_rows) if baseline_rows else 'none present'
  line = (f'Average gain over the baselines ({names}; relative gain of Avg '
          f'over each baseline, averaged): ')
  line += '; '.join(gains) if gains else MISSING
  line += '.'
  if paper_average_gain is not None:
    line += f' Paper (abstract): FedSeIT {paper_average_gain:+.1f} %.'
  return '\n'.join(lines + ['', line])
