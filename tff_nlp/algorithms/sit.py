"""Selective Inter-client Transfer (SIT): task representations and selection.

Reference:
  Yatin Chaudhary, Pranav Rai, Matthias Schubert, Hinrich Schütze, Pankaj
  Gupta. Federated Continual Learning for Text Classification via Selective
  Inter-client Transfer. Findings of EMNLP 2022 (arXiv 2210.06101); restated,
  with the authors' code `RaiPranav/FCL-FedSeIT`, in
  ../shared/docs/fedseit_spec.md (§5, §9).

In federated continual learning (FCL) client c learns tasks t = 0, 1, ... in
sequence and uploads each task's sparse task-adaptive weights A_c^t to the
server, which keeps them in slots `slot = client * tasks_per_client + task`
(`slot`). When a client starts a task, FedWeIT / FedSeIT would send it the
A's of every client; SIT sends only the K stored A's of the tasks whose
training documents overlap most with the new task's, with initial attention
weights α proportional to the overlap:

1.  Document vectors (`document_vectors`): d(x) is the mean of the frozen
    embedding rows of the document's tokens (padding and OOV ignored; 0 for a
    document without such a token).
2.  Task representation R_c^t (`task_representation`): k-means of the task's
    document vectors (k = 200, k-means++, 3 restarts, 100 Lloyd iterations,
    seed 42), one vector per cluster; all document vectors when the task has
    fewer than k documents. Sent to the server once per task, as a fixed-shape
    [max_vectors, D] tensor and its row count (`pad_representation`).
3.  Overlap score at the server (`overlap_score`), with u, v ranging over
    the rows of R_t and R_t' and τ = 0.7:

        s(t, t') = 1 / (|R_t| |R_t'|) Σ_u Σ_v cos(u, v) · 1[cos(u, v) > τ]

    ('rectified_linear'; also 'linear', 'step' and 'count_rectified_linear').
4.  Selection (`candidate_mask`, `select_top_k`): among the stored A's of the
    other clients (and, for parity with the authors' code, optionally the
    client's own earlier tasks; spec §9.6), the top K by s; α_k = s_k / Σ s
    over the K selected. The client initialises its K knowledge-base slots
    and its (trainable) α with them.

The numpy functions (1, 2) run on the client, offline; the TF functions (3, 4)
are pure TF ops on fixed shapes, masked by counts, for use inside a
`tff.tensorflow.computation` (or the server's Python loop).

Our representation. The paper and code average frozen public GloVe vectors
(840B, 300-d); GloVe is not available here, so our experiments use the
model's word embedding, learned federatedly on the first task and frozen
afterwards. `document_vectors` takes any frozen embedding matrix.

Privacy argument (spec §5). Only a few hundred vectors in a frozen embedding
space cross the wire, once per task: no text, token ids, labels or gradients
on data. Averaging tokens into document vectors and documents into cluster
centroids makes reconstructing individual documents hard, and the selection
runs on the server, so a client never sees another client's representation,
only the A's selected for it. Caveats:

*   The authors' `kmedoids` pick sends one real document vector per cluster
    (here `pick='medoid'` or `'code'`); our default `pick='centroid'` sends
    cluster means, which are not documents.
*   A task with fewer documents than clusters sends every document vector
    (spec §5): a mean of a short document's token embeddings reveals much of
    its bag of words, all the more with an embedding the server knows. Our
    learned embedding is the server's global model, so, unlike GloVe, it is
    not public, but the server does know it.
*   The representation is computed from the training documents, so the
    server learns something about every task's data distribution (by design:
    that is what the scores measure). No formal (e.g. differential) privacy
    guarantee is claimed, by the paper or here.
*   The authors' code also sends label names, for logging; we send none.
"""

from collections.abc import Sequence
from typing import Optional, Union

import numpy as np
import tensorflow as tf

METHODS = ('rectified_linear', 'linear', 'step', 'count_rectified_linear')
PICKS = ('centroid', 'medoid', 'code')

# Elements of a [docs, length, dim] gather per chunk in `document_vectors`.
_CHUNK_ELEMENTS = 1 << 22
# Cosines this close count as ties in the medoid and code picks.
_TIE_TOLERANCE = 1e-9


def slot(client: int, task: int, tasks_per_client: int) -> int:
  """The A-store slot of (client, task): `client * tasks_per_client + task`."""
  return client * tasks_per_client + task


# ---------------------------------------------------------------------------
# Client side (numpy): document vectors and task representations.


def document_vectors(token_ids: np.ndarray,
                     embedding: np.ndarray,
                     pad_id: int = 0,
                     oov_id: Optional[int] = 1) -> np.ndarray:
  """The mean embedding of each document's tokens.

  Args:
    token_ids: int[N, L], N documents padded to length L.
    embedding: float[V, D], a frozen embedding matrix (any: GloVe rows, or
      the model's word embedding).
    pad_id: The padding id; its tokens are ignored.
    oov_id: The out-of-vocabulary id, whose tokens are ignored too (its
      embedding row says nothing about the word), or None to keep them.

  Returns:
    float32[N, D]: row i is the mean of `embedding[token]` over the tokens of
    document i other than `pad_id` and `oov_id` (summed in float64), or 0
    if it has no such token.

  Raises:
    ValueError: If the shapes are not [N, L] and [V, D] or an id is outside
      [0, V).
  """
  token_ids = np.asarray(token_ids)
  embedding = np.asarray(embedding)
  if token_ids.ndim != 2:
    raise ValueError(
        f'token_ids must be [documents, length], got shape {token_ids.shape}.')
  if embedding.ndim != 2:
    raise ValueError(
        f'embedding must be [vocabulary, dim], got shape {embedding.shape}.')
  if not token_ids.size:
    token_ids = token_ids.astype(np.int64)
  if not np.issubdtype(token_ids.dtype, np.integer):
    raise ValueError(f'token_ids must be integers, got {token_ids.dtype}.')
  vocab_size, dim = embedding.shape
  if token_ids.size and (token_ids.min() < 0 or token_ids.max() >= vocab_size):
    raise ValueError(
        f'token ids must be in [0, {vocab_size}), got '
        f'[{token_ids.min()}, {token_ids.max()}].')
  num_docs, length = token_ids.shape
  keep = token_ids != pad_id
  if oov_id is not None:
    keep &= token_ids != oov_id
  result = np.zeros([num_docs, dim], np.float32)
  chunk = max(1, _CHUNK_ELEMENTS // max(1, length * dim))
  for first in range(0, num_docs, chunk):
    ids = token_ids[first:first + chunk]
    mask = keep[first:first + chunk]
    rows = embedding[ids].astype(np.float64)  # [n, L, D]
    sums = np.einsum('nld,nl->nd', rows, mask.astype(np.float64))
    counts = mask.sum(axis=1)
    means = np.divide(sums, counts[:, None], out=np.zeros_like(sums),
                      where=counts[:, None] > 0)
    result[first:first + chunk] = means
  return result


def _squared_distances(x: np.ndarray, centers: np.ndarray,
                       x_norms: np.ndarray) -> np.ndarray:
  """[n, k] squared Euclidean distances, clipped at 0."""
  c_norms = np.einsum('kd,kd->k', centers, centers)
  d = x_norms[:, None] - 2.0 * (x @ centers.T) + c_norms[None, :]
  return np.maximum(d, 0.0)


def _kmeans_plus_plus(x: np.ndarray, x_norms: np.ndarray, k: int,
                      rng: np.random.Generator) -> np.ndarray:
  """Greedy k-means++ seeding: k rows of x (float64 [k, D]).

  The first centre is a uniformly random point; each next one is the best,
  by the resulting potential (sum of squared distances to the nearest
  centre), of 2 + floor(ln k) points drawn with probability proportional to
  their squared distance to the nearest centre so far (Arthur & Vassilvitskii
  2007, with scikit-learn's local trials). When every point is on a centre
  (potential 0), the trials are drawn uniformly.
  """
  n = x.shape[0]
  trials = 2 + int(np.log(k))
  centers = np.empty([k, x.shape[1]], np.float64)
  first = int(rng.integers(n))
  centers[0] = x[first]
  closest = _squared_distances(x, x[first:first + 1], x_norms)[:, 0]
  for c in range(1, k):
    cumulative = np.cumsum(closest)
    potential = cumulative[-1]
    if potential > 0:
      draws = rng.random(trials) * potential
      candidates = np.minimum(
          np.searchsorted(cumulative, draws, side='right'), n - 1)
    else:
      candidates = rng.integers(n, size=trials)
    # [trials, n]: each candidate's new nearest-centre distances.
    distances = _squared_distances(x, x[candidates], x_norms).T
    new_closest = np.minimum(closest[None, :], distances)
    best = int(np.argmin(new_closest.sum(axis=1)))
    centers[c] = x[candidates[best]]
    closest = new_closest[best]
  return centers


def _relocate_empty(labels: np.ndarray, distances: np.ndarray,
                    k: int) -> np.ndarray:
  """Moves far points into empty clusters so that every cluster has one.

  Each empty cluster (in index order) takes the point farthest from its
  assigned centre (ties: lower index) among the points not yet moved whose
  cluster has two or more points, so no cluster is emptied. With n >= k
  points such a point always exists.
  """
  counts = np.bincount(labels, minlength=k)
  empty = np.flatnonzero(counts == 0)
  if not empty.size:
    return labels
  labels = labels.copy()
  own = distances[np.arange(len(labels)), labels]
  order = iter(np.argsort(-own, kind='stable'))
  for cluster in empty:
    for point in order:
      if counts[labels[point]] > 1:
        counts[labels[point]] -= 1
        labels[point] = cluster
        counts[cluster] = 1
        break
  return labels


def _means(x: np.ndarray, labels: np.ndarray, k: int) -> np.ndarray:
  one_hot = np.zeros([k, x.shape[0]], np.float64)
  one_hot[labels, np.arange(x.shape[0])] = 1.0
  counts = one_hot.sum(axis=1, keepdims=True)
  return (one_hot @ x) / counts  # Every cluster has a point.


def _lloyd(x: np.ndarray, x_norms: np.ndarray, centers: np.ndarray,
           max_iter: int) -> tuple[np.ndarray, np.ndarray, float]:
  """Lloyd iterations: (labels, centres, inertia), every cluster non-empty.

  An iteration assigns each point to its nearest centre (ties: lower
  cluster index), re-seeds empty clusters (`_relocate_empty`) and stops if
  the assignment did not change; otherwise the centres become the means of
  their points. The returned centres are the means of the returned labels.
  """
  k = centers.shape[0]
  labels = None
  for _ in range(max_iter):
    distances = _squared_distances(x, centers, x_norms)
    new_labels = _relocate_empty(np.argmin(distances, axis=1), distances, k)
    if labels is not None and np.array_equal(new_labels, labels):
      break
    labels = new_labels
    centers = _means(x, labels, k)
  inertia = float(np.sum((x - centers[labels])**2))
  return labels, centers, inertia


def kmeans(x: np.ndarray, num_clusters: int, *, seed: int = 42,
           n_init: int = 3,
           max_iter: int = 100) -> tuple[np.ndarray, np.ndarray]:
  """k-means of the rows of x: (labels int[N], centres float64[k, D]).

  Greedy k-means++ seeding, then Lloyd iterations (squared Euclidean
  distance) until the assignment no longer changes or `max_iter`; of `n_init`
  such runs (drawn in turn from one `np.random.default_rng(seed)`) the one of
  lowest inertia (first on ties). Empty clusters are re-seeded with the
  farthest points of clusters of two or more, so every one of the k clusters
  has at least one point and no centre is NaN (with fewer distinct points
  than k, some centres coincide). The same arguments give the same result;
  it is not bit-identical to scikit-learn's `KMeans`, whose random draws
  differ.

  Args:
    x: float[N, D], N >= num_clusters.
    num_clusters: k >= 1.
    seed: The seed of the random draws.
    n_init: Runs with different seedings (>= 1).
    max_iter: Lloyd iterations per run (>= 1).

  Raises:
    ValueError: For N < k or a non-positive setting.
  """
  x = np.asarray(x, np.float64)
  if x.ndim != 2:
    raise ValueError(f'x must be [N, D], got shape {x.shape}.')
  for name, value in (('num_clusters', num_clusters), ('n_init', n_init),
                      ('max_iter', max_iter)):
    if int(value) != value or value < 1:
      raise ValueError(f'{name} must be a positive integer, got {value!r}.')
  if x.shape[0] < num_clusters:
    raise ValueError(
        f'k-means of {x.shape[0]} points into {num_clusters} clusters.')
  if not np.all(np.isfinite(x)):
    raise ValueError('x has non-finite values.')
  rng = np.random.default_rng(seed)
  x_norms = np.einsum('nd,nd->n', x, x)
  best = None
  for _ in range(n_init):
    centers = _kmeans_plus_plus(x, x_norms, num_clusters, rng)
    labels, centers, inertia = _lloyd(x, x_norms, centers, max_iter)
    if best is None or inertia < best[2]:
      best = (labels, centers, inertia)
  return best[0], best[1]


def _cosines_to_centers(x: np.ndarray, centers: np.ndarray,
                        labels: np.ndarray) -> np.ndarray:
  """cos(x_i, centre of i's cluster); 0 if either is the zero vector."""
  own = centers[labels]
  dots = np.einsum('nd,nd->n', x, own)
  norms = np.linalg.norm(x, axis=1) * np.linalg.norm(own, axis=1)
  return np.divide(dots, norms, out=np.zeros_like(dots), where=norms > 0)


def task_representation(doc_vectors: np.ndarray,
                        *,
                        num_clusters: int = 200,
                        pick: str = 'centroid',
                        seed: int = 42,
                        n_init: int = 3,
                        max_iter: int = 100) -> np.ndarray:
  """R_c^t: one vector per k-means cluster of a task's document vectors.

  Args:
    doc_vectors: float[N, D], e.g. `document_vectors` of the task's training
      documents.
    num_clusters: k. With N < k there is no clustering and all N document
      vectors are returned (spec §5; a privacy caveat, see the module
      docstring).
    pick: Each cluster's representative:
      'centroid' (default): the cluster mean, which is not a real document;
      'medoid': the member most cosine-similar to the centroid (lower document
        index on ties, up to 1e-9 for rounding), a real document vector;
      'code': the member *least* cosine-similar to the centroid, the authors'
        buggy `kmedoids` pick (spec §9.10), for parity only.
      Cosines with a zero vector are 0.
    seed: Seed of the k-means draws (`kmeans`).
    n_init: k-means runs; the one of lowest inertia is kept.
    max_iter: Lloyd iterations per run.

  Returns:
    float32[min(N, k), D]; with N >= k, row j represents cluster j of
    `kmeans(doc_vectors, k, ...)`. Every cluster has a member (empty clusters
    are re-seeded), so there are exactly k rows and no NaN. Deterministic for
    a given seed.

  Raises:
    ValueError: For an unknown pick, a doc_vectors that is not 2-D or has
      non-finite values, or a non-positive setting.
  """
  if pick not in PICKS:
    raise ValueError(f'pick must be one of {PICKS}, got {pick!r}.')
  x = np.asarray(doc_vectors)
  if x.ndim != 2:
    raise ValueError(f'doc_vectors must be [N, D], got shape {x.shape}.')
  if int(num_clusters) != num_clusters or num_clusters < 1:
    raise ValueError(
        f'num_clusters must be a positive integer, got {num_clusters!r}.')
  if not np.all(np.isfinite(x)):
    raise ValueError('doc_vectors has non-finite values.')
  if x.shape[0] < num_clusters:
    return x.astype(np.float32)
  x = x.astype(np.float64)
  labels, centers = kmeans(x, num_clusters, seed=seed, n_init=n_init,
                           max_iter=max_iter)
  if pick == 'centroid':
    return centers.astype(np.float32)
  cosines = _cosines_to_centers(x, centers, labels)
  if pick == 'code':
    cosines = -cosines
  chosen = []
  for cluster in range(num_clusters):
    members = np.flatnonzero(labels == cluster)
    # The first member within rounding (_TIE_TOLERANCE) of the best.
    best = np.max(cosines[members])
    near_best = cosines[members] >= best - _TIE_TOLERANCE
    chosen.append(members[np.argmax(near_best)])
  return x[chosen].astype(np.float32)


def pad_representation(rep: np.ndarray,
                       max_vectors: int) -> tuple[np.ndarray, np.int32]:
  """A representation as a fixed-shape value for TFF: (padded, count).

  Args:
    rep: float[n, D], n <= max_vectors.
    max_vectors: The fixed number of rows (e.g. `num_clusters`).

  Returns:
    float32[max_vectors, D] with `rep` in its first n rows and zeros after,
    and n as an int32.

  Raises:
    ValueError: If `rep` is not 2-D or has more than `max_vectors` rows (it
      is never truncated silently).
  """
  rep = np.asarray(rep)
  if rep.ndim != 2:
    raise ValueError(f'rep must be [n, D], got shape {rep.shape}.')
  if rep.shape[0] > max_vectors:
    raise ValueError(
        f'rep has {rep.shape[0]} vectors, more than max_vectors='
        f'{max_vectors}.')
  padded = np.zeros([max_vectors, rep.shape[1]], np.float32)
  padded[:rep.shape[0]] = rep
  return padded, np.int32(rep.shape[0])


# ---------------------------------------------------------------------------
# Server side (TF): overlap scores and selection.


def _unit_rows(x: tf.Tensor) -> tf.Tensor:
  """x / ||x|| along the last axis; zero rows stay zero."""
  norms = tf.sqrt(tf.reduce_sum(tf.square(x), axis=-1, keepdims=True))
  return tf.math.divide_no_nan(x, norms)


def overlap_score(query: tf.Tensor,
                  query_count: tf.Tensor,
                  store: tf.Tensor,
                  store_counts: tf.Tensor,
                  method: str = 'rectified_linear',
                  threshold: Union[float, tf.Tensor] = 0.7) -> tf.Tensor:
  """s(t, t'): the overlap of a task's representation with each stored one.

  With U the first `query_count` rows of `query` (R_t), V_s the first
  `store_counts[s]` rows of `store[s]` (R_t' of slot s), c = cos(u, v) over
  the pairs P = U x V_s and τ = `threshold`:

  *   'rectified_linear': Σ_P c·1[c > τ] / |P| (the paper's score);
  *   'linear': Σ_P c / |P| (mean cosine; can be negative);
  *   'step': |{c > τ}| / |P| (the fraction of pairs above τ);
  *   'count_rectified_linear': Σ_P c·1[c > τ] / |{c > τ}| (the mean of the
      cosines above τ), 0 if no pair is above τ.

  Padding rows are excluded (counts are clipped to [0, rows]); a cosine with
  a zero vector is 0; an empty U or V_s gives 0. Every score is symmetric in
  (t, t'). Pure TF on fixed shapes, for `tff.tensorflow.computation`s.

  Args:
    query: float[Q, D], R_t padded (`pad_representation`).
    query_count: int scalar, its rows.
    store: float[S, R, D], the stored representations, one per slot.
    store_counts: int[S], their rows (0 for an empty slot).
    method: One of `METHODS`.
    threshold: τ (0.7 in the paper), strict.

  Returns:
    float32[S].

  Raises:
    ValueError: For an unknown method or inputs of the wrong rank.
  """
  if method not in METHODS:
    raise ValueError(f'method must be one of {METHODS}, got {method!r}.')
  query = tf.convert_to_tensor(query, tf.float32)
  store = tf.convert_to_tensor(store, tf.float32)
  if query.shape.rank != 2 or store.shape.rank != 3:
    raise ValueError(
        f'query must be [Q, D] and store [S, R, D]; got shapes {query.shape} '
        f'and {store.shape}.')
  threshold = tf.cast(threshold, tf.float32)
  query_valid = tf.range(tf.shape(query)[0]) < tf.cast(query_count, tf.int32)
  store_valid = (tf.range(tf.shape(store)[1])[None, :]
                 < tf.cast(store_counts, tf.int32)[:, None])  # [S, R]
  cosines = tf.clip_by_value(
      tf.einsum('qd,srd->sqr', _unit_rows(query), _unit_rows(store)), -1.0,
      1.0)
  pairs = tf.logical_and(query_valid[None, :, None],
                         store_valid[:, None, :])  # [S, Q, R]
  above = tf.logical_and(pairs, cosines > threshold)
  num_pairs = (tf.reduce_sum(tf.cast(query_valid, tf.float32))
               * tf.reduce_sum(tf.cast(store_valid, tf.float32), axis=1))

  def total(mask, values=cosines):
    return tf.reduce_sum(tf.where(mask, values, tf.zeros_like(values)),
                         axis=[1, 2])

  if method == 'rectified_linear':
    return tf.math.divide_no_nan(total(above), num_pairs)
  if method == 'linear':
    return tf.math.divide_no_nan(total(pairs), num_pairs)
  num_above = tf.reduce_sum(tf.cast(above, tf.float32), axis=[1, 2])
  if method == 'step':
    return tf.math.divide_no_nan(num_above, num_pairs)
  return tf.math.divide_no_nan(total(above), num_above)


def select_top_k(
    scores: tf.Tensor,
    candidate_mask: tf.Tensor,  # pylint: disable=redefined-outer-name
    k: int,
) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor]:
  """The K stored A's sent to a client and their initial α.

  The candidates (`candidate_mask`) are ranked by score, highest first;
  equal scores go to the lower slot index first. The first min(k,
  #candidates) are selected.

  α_k = max(s_k, 0) / Σ_selected max(s, 0), so the selected α's sum to 1
  (spec §5: s_k / Σ s; the scores of 'rectified_linear', 'step' and
  'count_rectified_linear' are >= 0 for τ >= 0, and only a negative
  'linear' score is clipped). If every selected score is 0 (e.g. no pair of
  vectors above τ), α is uniform over the selected: 1/#selected each.
  A slot beyond the candidates (fewer than k of them) has key 0, α 0 and
  valid False; the client leaves that KB slot empty.

  Args:
    scores: float[S], finite, e.g. `overlap_score`.
    candidate_mask: bool[S].
    k: K >= 1, a Python int (it fixes the output shapes).

  Returns:
    (keys int32[k], alphas float32[k], valid bool[k]), in rank order.

  Raises:
    ValueError: If k is not a positive integer.
  """
  if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
    raise ValueError(f'k must be a positive Python int, got {k!r}.')
  k = int(k)
  scores = tf.cast(scores, tf.float32)
  mask = tf.cast(candidate_mask, tf.bool)
  num_slots = tf.shape(scores)[0]
  neg_inf = tf.constant(-np.inf, tf.float32)
  # k extra -inf entries so that top_k works for k > S; tf.math.top_k puts
  # the lower index first among equal values.
  ranked = tf.concat(
      [tf.where(mask, scores, neg_inf), tf.fill([k], neg_inf)], axis=0)
  values, indices = tf.math.top_k(ranked, k=k, sorted=True)
  padded_mask = tf.concat([mask, tf.zeros([k], tf.bool)], axis=0)
  valid = tf.logical_and(indices < num_slots,
                         tf.gather(padded_mask, indices))
  keys = tf.where(valid, indices, tf.zeros_like(indices))
  positive = tf.where(valid, tf.maximum(values, 0.0), tf.zeros_like(values))
  total = tf.reduce_sum(positive)
  num_valid = tf.reduce_sum(tf.cast(valid, tf.float32))
  uniform = tf.math.divide_no_nan(tf.cast(valid, tf.float32), num_valid)
  alphas = tf.where(total > 0.0, tf.math.divide_no_nan(positive, total),
                    uniform)
  return tf.cast(keys, tf.int32), alphas, valid


def candidate_mask(num_clients: int,
                   tasks_per_client: int,
                   client: Union[int, tf.Tensor],
                   task: Union[int, tf.Tensor],
                   stored: Union[Sequence[bool], tf.Tensor],
                   include_own: bool = False) -> tf.Tensor:
  """Which stored A's a client may receive for its task.

  Slots are `slot(c, t, tasks_per_client)`. Candidates are the stored slots
  of the other clients, and with `include_own` also the client's own earlier
  tasks (t' < task; the authors' code, spec §9.6; the paper says foreign
  clients' tasks, our default). The requesting (client, task) itself is never
  a candidate.

  Args:
    num_clients: C, a Python int.
    tasks_per_client: T, a Python int.
    client: The requesting client (int or int scalar tensor).
    task: Its current task.
    stored: bool[C*T], the slots the server holds an A for.
    include_own: Whether the client's own earlier tasks are candidates.

  Returns:
    bool[C*T].

  Raises:
    ValueError: For non-positive C or T, or a static `stored` of another
      size.
  """
  if num_clients < 1 or tasks_per_client < 1:
    raise ValueError(
        f'num_clients and tasks_per_client must be positive, got '
        f'{num_clients} and {tasks_per_client}.')
  num_slots = num_clients * tasks_per_client
  stored = tf.cast(stored, tf.bool)
  if stored.shape.rank != 1 or stored.shape[0] not in (None, num_slots):
    raise ValueError(
        f'stored must be bool[{num_slots}], got shape {stored.shape}.')
  slots = tf.range(num_slots)
  slot_client = slots // tasks_per_client
  slot_task = slots % tasks_per_client
  client = tf.cast(client, tf.int32)
  task = tf.cast(task, tf.int32)
  allowed = tf.not_equal(slot_client, client)
  if include_own:
    allowed = tf.logical_or(
        allowed,
        tf.logical_and(tf.equal(slot_client, client), slot_task < task))
  return tf.logical_and(stored, allowed)
