"""Tests of SIT: document vectors, k-means representations, scores, selection.

The numpy references (`_reference_*`) loop over documents, vector pairs and
slots in float64; the tiny cases are worked out by hand in comments.
"""

import math
from unittest import mock

from absl.testing import parameterized
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_nlp import algorithms
from tff_nlp.algorithms import sit

_F32, _I32 = np.float32, np.int32
_SQRT2 = math.sqrt(2.0)


# ---------------------------------------------------------------------------
# numpy references.


def _reference_document_vectors(token_ids, embedding, pad_id, oov_id):
  result = np.zeros([len(token_ids), embedding.shape[1]])
  for i, doc in enumerate(token_ids):
    kept = [t for t in doc if t != pad_id and t != oov_id]
    if kept:
      result[i] = np.mean([embedding[t].astype(np.float64) for t in kept],
                          axis=0)
  return result


def _cos(u, v):
  norms = np.linalg.norm(u) * np.linalg.norm(v)
  return float(u @ v / norms) if norms > 0 else 0.0


def _reference_score(query, query_count, rep, count, method, threshold):
  cosines = [_cos(u.astype(np.float64), v.astype(np.float64))
             for u in query[:query_count] for v in rep[:count]]
  if not cosines:
    return 0.0
  above = [c for c in cosines if c > threshold]
  if method == 'rectified_linear':
    return sum(above) / len(cosines)
  if method == 'linear':
    return sum(cosines) / len(cosines)
  if method == 'step':
    return len(above) / len(cosines)
  return sum(above) / len(above) if above else 0.0


def _reference_top_k(scores, mask, k):
  order = sorted((i for i in range(len(scores)) if mask[i]),
                 key=lambda i: (-scores[i], i))[:k]
  positive = [max(scores[i], 0.0) for i in order]
  total = sum(positive)
  alphas = ([p / total for p in positive] if total > 0
            else [1.0 / len(order)] * len(order))
  pad = k - len(order)
  return (order + [0] * pad, alphas + [0.0] * pad,
          [True] * len(order) + [False] * pad)


def _blobs(centers, per_blob, scale, seed):
  rng = np.random.default_rng(seed)
  points = [c + scale * rng.normal(size=(per_blob, len(c))) for c in centers]
  return np.concatenate(points).astype(_F32)


# ---------------------------------------------------------------------------


class DocumentVectorsExecutionTest(tf.test.TestCase, parameterized.TestCase):

  # Rows: 0 padding, 1 OOV (both ignored by default), then three words.
  _EMBEDDING = np.array([[9, 9], [7, 7], [1, 0], [0, 2], [3, 3]], _F32)
  _DOCS = np.array([[2, 3, 0, 0], [4, 1, 4, 0], [0, 1, 0, 0], [2, 2, 3, 1]])

  @parameterized.named_parameters(
      # [2, 3]: ((1, 0) + (0, 2)) / 2 = (0.5, 1); [4, 4]: (3, 3); only pad
      # and OOV: 0; [2, 2, 3]: (1 + 1 + 0, 0 + 0 + 2) / 3 = (2/3, 2/3).
      ('ignore_oov', 1, [[0.5, 1], [3, 3], [0, 0], [2 / 3, 2 / 3]]),
      # The OOV row (7, 7) counts: [4, 1, 4]: (3+7+3)/3 = 13/3; [1]: (7, 7);
      # [2, 2, 3, 1]: (1+1+0+7, 0+0+2+7)/4 = (9/4, 9/4).
      ('keep_oov', None, [[0.5, 1], [13 / 3, 13 / 3], [7, 7], [2.25, 2.25]]),
  )
  def test_hand_computed_means(self, oov_id, expected):
    vectors = sit.document_vectors(self._DOCS, self._EMBEDDING, oov_id=oov_id)
    self.assertEqual(vectors.dtype, _F32)
    self.assertAllClose(vectors, expected, atol=1e-6)

  @parameterized.named_parameters(('one_chunk', 1 << 22), ('chunks_of_3', 3))
  def test_matches_reference_on_random_documents(self, chunk_elements):
    rng = np.random.default_rng(0)
    embedding = rng.normal(size=(50, 6)).astype(_F32)
    token_ids = rng.integers(0, 50, size=(11, 7))
    token_ids[:, 5:] = 0  # Post-padding.
    token_ids[3] = 0  # An empty document.
    with mock.patch.object(sit, '_CHUNK_ELEMENTS', chunk_elements * 7 * 6):
      vectors = sit.document_vectors(token_ids, embedding, pad_id=0, oov_id=1)
    self.assertAllClose(
        vectors, _reference_document_vectors(token_ids, embedding, 0, 1),
        atol=1e-6)
    self.assertAllEqual(vectors[3], np.zeros(6))

  @parameterized.named_parameters(
      ('id_too_large', [[0, 5]], 'token ids must be in'),
      ('negative_id', [[-1, 2]], 'token ids must be in'),
      ('not_2d', [1, 2], 'documents, length'),
      ('floats', [[1.0, 2.0]], 'integers'),
  )
  def test_invalid_input_raises(self, token_ids, message):
    with self.assertRaisesRegex(ValueError, message):
      sit.document_vectors(np.array(token_ids), self._EMBEDDING)


class KMeansExecutionTest(tf.test.TestCase, parameterized.TestCase):

  # Three well-separated blobs of 40 points each (std 0.1, centres 14 or
  # more apart).
  _CENTERS = np.array([[10.0, 0.0, 0.0], [0.0, 10.0, 0.0],
                       [-10.0, -10.0, 5.0]])

  def test_recovers_three_blobs(self):
    x = _blobs(self._CENTERS, 40, 0.1, seed=1)
    labels, centers = sit.kmeans(x, 3, seed=42)
    truth = np.repeat(np.arange(3), 40)
    # The same partition up to the order of the clusters.
    for blob in range(3):
      self.assertLen(set(labels[truth == blob]), 1)
    self.assertLen(set(labels), 3)
    for cluster in range(3):
      self.assertAllClose(centers[cluster],
                          x[labels == cluster].astype(np.float64).mean(0))
    # Each centre is within 0.1 of its blob's true centre.
    distances = np.linalg.norm(centers[:, None] - self._CENTERS[None], axis=2)
    self.assertAllLess(distances.min(axis=1), 0.1)

  def test_converged_result_is_a_lloyd_fixed_point(self):
    x = np.random.default_rng(3).normal(size=(300, 4))
    labels, centers = sit.kmeans(x, 7, seed=0)
    distances = ((x[:, None] - centers[None])**2).sum(-1)
    self.assertAllEqual(labels, np.argmin(distances, axis=1))
    for cluster in range(7):
      self.assertAllClose(centers[cluster], x[labels == cluster].mean(0))

  def test_restarts_keep_the_lowest_inertia(self):
    # The first of n_init=5 runs draws what the single run draws, so the
    # best of five is at least as good.
    x = np.random.default_rng(4).normal(size=(200, 2))

    def inertia(n_init):
      labels, centers = sit.kmeans(x, 12, seed=7, n_init=n_init)
      return np.sum((x - centers[labels])**2)

    self.assertLessEqual(inertia(5), inertia(1) + 1e-9)

  @parameterized.named_parameters(
      # 10 copies of one point into 4 clusters: k-means++ falls back to
      # uniform draws, Lloyd re-seeds the empty clusters.
      ('identical_points', np.tile([[1.0, 2.0]], (10, 1)), 4),
      # 3 distinct points (each 4 times) into 5 clusters.
      ('fewer_distinct_than_k',
       np.repeat([[0.0, 0.0], [5.0, 0.0], [0.0, 5.0]], 4, axis=0), 5),
  )
  def test_no_empty_cluster_and_no_nan(self, x, k):
    labels, centers = sit.kmeans(x, k, seed=0)
    self.assertAllGreater(np.bincount(labels, minlength=k), 0)
    self.assertTrue(np.all(np.isfinite(centers)))
    rep = sit.task_representation(x, num_clusters=k)
    self.assertEqual(rep.shape, (k, 2))
    # Every centre is one of the distinct points.
    for center in centers:
      self.assertIn(tuple(center), {tuple(p) for p in x})

  def test_invalid_arguments_raise(self):
    with self.assertRaisesRegex(ValueError, '3 points into 4'):
      sit.kmeans(np.zeros([3, 2]), 4)
    with self.assertRaisesRegex(ValueError, 'n_init'):
      sit.kmeans(np.zeros([3, 2]), 2, n_init=0)


class TaskRepresentationExecutionTest(tf.test.TestCase, parameterized.TestCase):

  # One cluster (k = 1) of four 2-D documents: the centroid is their mean
  # (5/4, 5/4), direction (1, 1). Cosines with it: (1, 0) and (0, 1):
  # 1/√2 = 0.7071; (1, 1) and (3, 3): 1. The medoid is the first of the most
  # similar, (1, 1) (document 2); the code's pick the first of the least
  # similar, (1, 0) (document 0).
  _DOCS = np.array([[1, 0], [0, 1], [1, 1], [3, 3]], _F32)

  @parameterized.named_parameters(
      ('centroid', 'centroid', [[1.25, 1.25]]),
      ('medoid', 'medoid', [[1, 1]]),
      ('code', 'code', [[1, 0]]),
  )
  def test_hand_computed_picks(self, pick, expected):
    rep = sit.task_representation(self._DOCS, num_clusters=1, pick=pick)
    self.assertEqual(rep.dtype, _F32)
    self.assertAllClose(rep, expected)

  def test_picks_on_blobs(self):
    x = _blobs(KMeansExecutionTest._CENTERS, 30, 1.0, seed=5)
    labels, centers = sit.kmeans(x, 3, seed=42)
    reps = {pick: sit.task_representation(x, num_clusters=3, pick=pick)
            for pick in sit.PICKS}
    self.assertAllClose(reps['centroid'], centers)
    for cluster in range(3):
      members = x[labels == cluster]
      cosines = [_cos(m.astype(np.float64), centers[cluster])
                 for m in members]
      # medoid: the most similar member; code: the least similar one.
      self.assertAllEqual(reps['medoid'][cluster],
                          members[int(np.argmax(cosines))])
      self.assertAllEqual(reps['code'][cluster],
                          members[int(np.argmin(cosines))])
      self.assertLess(min(cosines), max(cosines))

  def test_fewer_documents_than_clusters_returns_them_all(self):
    x = np.random.default_rng(6).normal(size=(9, 4))
    for pick in sit.PICKS:
      rep = sit.task_representation(x, num_clusters=10, pick=pick)
      self.assertEqual(rep.dtype, _F32)
      self.assertAllEqual(rep, x.astype(_F32))
    # With exactly k documents k-means runs: every document is a cluster.
    rep = sit.task_representation(x, num_clusters=9)
    self.assertAllClose(sorted(map(tuple, rep)), sorted(map(tuple, x)),
                        atol=1e-6)
    self.assertEqual(sit.task_representation(np.zeros([0, 4])).shape, (0, 4))

  def test_deterministic_for_a_seed(self):
    x = np.random.default_rng(8).normal(size=(500, 8))
    first = sit.task_representation(x, num_clusters=20, seed=3)
    second = sit.task_representation(x, num_clusters=20, seed=3)
    self.assertAllEqual(first, second)
    self.assertEqual(first.shape, (20, 8))
    self.assertFalse(np.any(np.isnan(first)))

  def test_zero_document_vectors_give_no_nan(self):
    # Documents without a known token are zero vectors; their cosine with
    # any centroid is 0, not NaN.
    x = np.concatenate([np.zeros([5, 3]),
                        _blobs(KMeansExecutionTest._CENTERS, 5, 0.1, seed=2)])
    for pick in sit.PICKS:
      rep = sit.task_representation(x, num_clusters=4, pick=pick)
      self.assertTrue(np.all(np.isfinite(rep)))

  def test_invalid_arguments_raise(self):
    with self.assertRaisesRegex(ValueError, 'pick'):
      sit.task_representation(self._DOCS, pick='kmedoids')
    with self.assertRaisesRegex(ValueError, 'non-finite'):
      sit.task_representation(np.array([[np.nan, 0.0]]))

  def test_pad_representation(self):
    padded, count = sit.pad_representation(self._DOCS[:3], 5)
    self.assertEqual((padded.dtype, padded.shape), (_F32, (5, 2)))
    self.assertEqual((count.dtype, int(count)), (_I32, 3))
    self.assertAllEqual(padded[:3], self._DOCS[:3])
    self.assertAllEqual(padded[3:], np.zeros([2, 2]))
    with self.assertRaisesRegex(ValueError, 'more than max_vectors'):
      sit.pad_representation(self._DOCS, 3)


class OverlapScoreExecutionTest(tf.test.TestCase, parameterized.TestCase):

  # R_t = {u1 = (1, 0), u2 = (0, 1)}, padded with a row (5, 5) that would
  # match slot 0 if it counted.
  _QUERY = np.array([[1, 0], [0, 1], [5, 5]], _F32)
  # Slot 0: {(1, 0), (1, 1), (0, -1)}. Cosines with u1: 1, 1/√2, 0; with u2:
  # 0, 1/√2, -1. Slot 1: {(-1, 0)} and a padding row (1, 0): cosines -1 and
  # 0 (the padding's 1 must not count). Slot 2: empty (count 0).
  _STORE = np.array([[[1, 0], [1, 1], [0, -1]],
                     [[-1, 0], [1, 0], [0, 0]],
                     [[1, 0], [1, 0], [1, 0]]], _F32)
  _COUNTS = np.array([3, 1, 0], _I32)

  @parameterized.named_parameters(
      # τ = 0.7: slot 0 has 3 of 6 pairs above (1, 1/√2, 1/√2), sum
      # 1 + √2.
      ('rectified_linear', 'rectified_linear', 0.7,
       [(1 + _SQRT2) / 6, 0, 0]),
      # All 6 cosines: 1 + 1/√2 + 0 + 0 + 1/√2 - 1 = √2; slot 1: -1/2.
      ('linear', 'linear', 0.7, [_SQRT2 / 6, -0.5, 0]),
      ('step', 'step', 0.7, [3 / 6, 0, 0]),
      ('count_rectified_linear', 'count_rectified_linear', 0.7,
       [(1 + _SQRT2) / 3, 0, 0]),
      # τ = 0.75: 1/√2 = 0.7071 is no longer above; only the 1 is.
      ('rectified_linear_075', 'rectified_linear', 0.75, [1 / 6, 0, 0]),
      ('step_075', 'step', 0.75, [1 / 6, 0, 0]),
      ('count_rectified_linear_075', 'count_rectified_linear', 0.75,
       [1, 0, 0]),
  )
  def test_hand_computed_scores(self, method, threshold, expected):
    scores = sit.overlap_score(self._QUERY, 2, self._STORE, self._COUNTS,
                               method=method, threshold=threshold)
    self.assertEqual(scores.dtype, tf.float32)
    self.assertAllClose(scores, expected, atol=1e-6)

  @parameterized.named_parameters(
      # Query {(1, 0), (0, 0)}, store {(1, 0)}: cosines 1 and 0 (the zero
      # vector): linear (1 + 0)/2, rectified 1/2, step 1/2, count 1/1.
      ('rectified_linear', 'rectified_linear', 0.5),
      ('linear', 'linear', 0.5),
      ('step', 'step', 0.5),
      ('count_rectified_linear', 'count_rectified_linear', 1.0),
  )
  def test_zero_vectors_have_cosine_zero(self, method, expected):
    query = np.array([[1, 0], [0, 0]], _F32)
    store = np.array([[[1, 0]], [[0, 0]]], _F32)
    scores = sit.overlap_score(query, 2, store, [1, 1], method=method)
    self.assertAllClose(scores, [expected, 0.0])
    self.assertFalse(np.any(np.isnan(scores)))

  @parameterized.parameters(*sit.METHODS)
  def test_matches_reference_with_padding(self, method):
    rng = np.random.default_rng(11)
    # 3-D vectors: many pairs above τ = 0.3 and below; padding rows are
    # random (not zero) so counting them would show.
    query = rng.normal(size=(6, 3)).astype(_F32)
    store = rng.normal(size=(5, 4, 3)).astype(_F32)
    store[2, 1] = 0.0  # A zero vector inside the counts.
    counts = np.array([4, 2, 0, 3, 1], _I32)
    scores = sit.overlap_score(query, 5, store, counts, method=method,
                               threshold=0.3)
    expected = [_reference_score(query, 5, store[s], counts[s], method, 0.3)
                for s in range(5)]
    self.assertAllClose(scores, expected, atol=1e-5)

  @parameterized.parameters(*sit.METHODS)
  def test_symmetric_and_empty_query_scores_zero(self, method):
    rng = np.random.default_rng(12)
    a = rng.normal(size=(4, 3)).astype(_F32)
    b = rng.normal(size=(4, 3)).astype(_F32)
    ab = sit.overlap_score(a, 3, b[None], [2], method=method, threshold=0.2)
    ba = sit.overlap_score(b, 2, a[None], [3], method=method, threshold=0.2)
    self.assertAllClose(ab, ba, atol=1e-6)
    empty = sit.overlap_score(a, 0, np.stack([a, b]), [4, 4], method=method)
    self.assertAllEqual(empty, [0.0, 0.0])

  def test_invalid_method_raises(self):
    with self.assertRaisesRegex(ValueError, 'method'):
      sit.overlap_score(self._QUERY, 2, self._STORE, self._COUNTS,
                        method='rectified_linear_normalised')


class SelectTopKExecutionTest(tf.test.TestCase, parameterized.TestCase):

  def _select(self, scores, mask, k):
    keys, alphas, valid = sit.select_top_k(
        np.array(scores, _F32), np.array(mask, bool), k)
    self.assertEqual((keys.dtype, alphas.dtype, valid.dtype),
                     (tf.int32, tf.float32, tf.bool))
    self.assertEqual(keys.shape, [k])
    return keys.numpy().tolist(), alphas.numpy(), valid.numpy().tolist()

  @parameterized.named_parameters(
      # Top 2 of 0.1, 0.4, 0.3, 0.2: slots 1, 2; α = 0.4/0.7, 0.3/0.7.
      ('top_2', [0.1, 0.4, 0.3, 0.2], [1, 1, 1, 1], 2,
       [1, 2], [4 / 7, 3 / 7], [True, True]),
      # Slot 3 scores highest but is not a candidate.
      ('non_candidate_skipped', [0.1, 0.4, 0.3, 0.9], [1, 1, 1, 0], 2,
       [1, 2], [4 / 7, 3 / 7], [True, True]),
      # Three slots tie at 0.5: the lower indices first.
      ('ties_lower_index_first', [0.5, 0.2, 0.5, 0.5], [1, 1, 1, 1], 2,
       [0, 2], [0.5, 0.5], [True, True]),
      ('ties_among_candidates', [0.5, 0.2, 0.5, 0.5], [0, 1, 1, 1], 2,
       [2, 3], [0.5, 0.5], [True, True]),
      # Two candidates for k = 4 (> S = 3): 0.9 and 0.3, α 0.75 and 0.25;
      # the spare slots have key 0, α 0.
      ('fewer_candidates_than_k', [0.3, 0.6, 0.9], [1, 0, 1], 4,
       [2, 0, 0, 0], [0.75, 0.25, 0, 0], [True, True, False, False]),
      # Selected scores all 0: α uniform over the two selected.
      ('all_zero_scores', [0.0, 0.0, 0.0], [1, 1, 0], 3,
       [0, 1, 0], [0.5, 0.5, 0], [True, True, False]),
      ('no_candidates', [0.4, 0.2], [0, 0], 2,
       [0, 0], [0, 0], [False, False]),
      # 'linear' scores can be negative: clipped to 0 for α.
      ('negative_score_clipped', [0.4, -0.2], [1, 1], 2,
       [0, 1], [1, 0], [True, True]),
      ('all_negative_uniform', [-0.4, -0.2], [1, 1], 2,
       [1, 0], [0.5, 0.5], [True, True]),
  )
  def test_hand_cases(self, scores, mask, k, keys, alphas, valid):
    got_keys, got_alphas, got_valid = self._select(scores, mask, k)
    self.assertEqual(got_keys, keys)
    self.assertAllClose(got_alphas, alphas, atol=1e-6)
    self.assertEqual(got_valid, valid)

  @parameterized.parameters(1, 3, 5, 12)
  def test_matches_reference(self, k):
    rng = np.random.default_rng(k)
    for _ in range(5):
      # Rounded to one decimal: many ties.
      scores = np.round(rng.uniform(size=9), 1).astype(_F32)
      mask = rng.uniform(size=9) < 0.7
      keys, alphas, valid = self._select(scores, mask, k)
      ref_keys, ref_alphas, ref_valid = _reference_top_k(
          scores.astype(np.float64).tolist(), mask, k)
      self.assertEqual(keys, ref_keys)
      self.assertAllClose(alphas, ref_alphas, atol=1e-6)
      self.assertEqual(valid, ref_valid)
      if any(valid):
        self.assertAlmostEqual(float(np.sum(alphas)), 1.0, places=5)

  @parameterized.parameters(0, -1, 2.0, True)
  def test_invalid_k_raises(self, k):
    with self.assertRaisesRegex(ValueError, 'k must be'):
      sit.select_top_k([0.1, 0.2], [True, True], k)


class CandidateMaskExecutionTest(tf.test.TestCase, parameterized.TestCase):

  # C = 3 clients, T = 2 tasks: slots c0t0, c0t1, c1t0, c1t1, c2t0, c2t1.
  # Stored: all but c2t1.
  _STORED = [True, True, True, True, True, False]

  @parameterized.named_parameters(
      # Client 1, task 1: the other clients' stored slots (0, 1, 4).
      ('foreign_only', 1, 1, False, [1, 1, 0, 0, 1, 0]),
      # + its own earlier task c1t0 (code parity); never c1t1 itself.
      ('include_own', 1, 1, True, [1, 1, 1, 0, 1, 0]),
      # Client 1, task 0: its own task 1 is not earlier, so not a candidate.
      ('include_own_no_later_tasks', 1, 0, True, [1, 1, 0, 0, 1, 0]),
      ('client_0', 0, 1, True, [1, 0, 1, 1, 1, 0]),
  )
  def test_hand_cases(self, client, task, include_own, expected):
    mask = sit.candidate_mask(3, 2, client, task, self._STORED,
                              include_own=include_own)
    self.assertAllEqual(mask, np.array(expected, bool))
    self.assertFalse(mask[sit.slot(client, task, 2)])

  def test_slot(self):
    self.assertEqual(sit.slot(2, 1, 5), 11)
    self.assertEqual(sit.slot(0, 4, 5), 4)

  def test_invalid_arguments_raise(self):
    with self.assertRaisesRegex(ValueError, 'bool\\[6\\]'):
      sit.candidate_mask(3, 2, 0, 0, [True] * 5)
    with self.assertRaisesRegex(ValueError, 'positive'):
      sit.candidate_mask(0, 2, 0, 0, [])


class ServerSelectionComputationTest(tf.test.TestCase):
  """Scores, candidates and top-K in one `tff.tensorflow.computation`."""

  def test_selection_inside_a_tff_computation(self):
    num_clients, tasks, max_vectors, dim, k = 3, 2, 3, 2, 2
    slots = num_clients * tasks

    @tff.tensorflow.computation(
        tff.TensorType(np.float32, [max_vectors, dim]),
        tff.TensorType(np.int32),
        tff.TensorType(np.float32, [slots, max_vectors, dim]),
        tff.TensorType(np.int32, [slots]),
        tff.TensorType(np.int32),
        tff.TensorType(np.int32),
    )
    def select(query, query_count, store, store_counts, client, task):
      scores = sit.overlap_score(query, query_count, store, store_counts)
      candidates = sit.candidate_mask(num_clients, tasks, client, task,
                                      store_counts > 0)
      keys, alphas, valid = sit.select_top_k(scores, candidates, k)
      return keys, alphas, valid, scores

    self.assertEqual(
        str(select.type_signature.result),
        '<int32[2],float32[2],bool[2],float32[6]>')
    # Client 1 starts task 1 with R = {(1, 0), (0, 1)}. Stored: c0t0 =
    # {(1, 0.1)} (cos with (1, 0) = 0.995 > 0.7: score 0.995/2), c0t1 =
    # {(0, 1), (1, 0)} (two cosines of 1 among 4 pairs: 0.5), c1t0 (own,
    # excluded) = {(1, 0)}, c2t0 = {(-1, 0)} (score 0). c1t1 and c2t1 are
    # not stored. Top 2: c0t1 (slot 1), c0t0 (slot 0).
    store = np.zeros([slots, max_vectors, dim], _F32)
    store[0, 0] = [1, 0.1]
    store[1, :2] = [[0, 1], [1, 0]]
    store[2, 0] = [1, 0]
    store[4, 0] = [-1, 0]
    counts = np.array([1, 2, 1, 0, 1, 0], _I32)
    query, query_count = sit.pad_representation([[1, 0], [0, 1]], max_vectors)
    keys, alphas, valid, scores = select(query, query_count, store, counts,
                                         1, 1)
    score_0 = 1 / math.sqrt(1.01) / 2
    self.assertAllClose(scores, [score_0, 0.5, 0.5, 0, 0, 0], atol=1e-6)
    self.assertAllEqual(keys, [1, 0])
    self.assertAllClose(alphas, [0.5 / (0.5 + score_0),
                                 score_0 / (0.5 + score_0)], atol=1e-6)
    self.assertAllEqual(valid, [True, True])


class EndToEndExecutionTest(tf.test.TestCase):

  def test_the_task_of_the_same_topic_is_selected(self):
    # Embedding: words 2-21 near topic A's direction, 22-41 near topic B's
    # (orthogonal), small noise. Client 0's task 0 and client 2's task 0
    # are about A, client 1's task 0 about B; client 0's task 1 (about A)
    # should draw client 2's task 0 first, then client 1's.
    rng = np.random.default_rng(0)
    dim = 8
    topics = np.eye(dim)[:2]
    embedding = np.concatenate([
        rng.normal(size=(2, dim)),
        topics[0] + 0.1 * rng.normal(size=(20, dim)),
        topics[1] + 0.1 * rng.normal(size=(20, dim)),
    ]).astype(_F32)

    def task(first_word, seed):
      ids = np.random.default_rng(seed).integers(
          first_word, first_word + 20, size=(60, 10))
      ids[:, 7:] = 0
      vectors = sit.document_vectors(ids, embedding)
      return sit.pad_representation(
          sit.task_representation(vectors, num_clusters=5), 5)

    reps = {0: task(2, 1), 2: task(22, 2), 4: task(2, 3)}  # c0t0, c1t0, c2t0
    store = np.zeros([6, 5, dim], _F32)
    counts = np.zeros([6], _I32)
    for s, (padded, count) in reps.items():
      store[s], counts[s] = padded, count
    query, query_count = task(2, 4)
    scores = sit.overlap_score(query, query_count, store, counts)
    candidates = sit.candidate_mask(3, 2, 0, 1, counts > 0)
    keys, _, valid = sit.select_top_k(scores, candidates, 2)
    self.assertAllEqual(keys, [4, 2])
    self.assertAllEqual(valid, [True, True])
    self.assertGreater(scores[4], 0.9)
    self.assertLess(scores[2], 0.05)

  def test_exported_from_algorithms(self):
    self.assertIs(algorithms.sit, sit)
