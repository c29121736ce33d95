"""Partial models: clients download and upload only the rows they use.

NLP models are dominated by vocabulary-indexed tensors (embeddings, output
softmax, bag-of-words weights) with far more rows than one client touches.
These pieces implement the technique of TFF's tutorial "Client-efficient
large-model federated learning via federated_select and sparse aggregation"
(restated in `shared/docs/federated_select.md`); one round:

1. Keys (`local_vocabulary.client_keys`): each client keeps the M tokens that
   occur in the most of its examples, padded to M, with the real count; or
   (`top_blocks`, `block_rows`) the M blocks of B consecutive rows whose
   tokens occur the most, so that a key brings B rows.
2. Select (`selection.build_row_selection`): `tff.federated_select` sends each
   client the rows at its keys, stacked into an M-row (M * B) local table.
3. Remap (`local_vocabulary.to_local_bag`): global token ids become positions
   in the key list; tokens not selected are dropped (and counted).
4. Train the local model (task code, e.g. `apps.partial_models.tag_process`).
5. Upload the real rows' updates as IndexedSlices (global ids, rows).
6. Aggregate (`aggregation.IndexedSlicesSumFactory` / `...MeanFactory`):
   sparse on the wire, a dense accumulator at the server; divide by the
   clients or, per row, by the clients that touched the row (`Divisor`).
7. Server update (`server_update.build_delta_finalizer`): apply the mean
   update, so rows nobody selected keep their values.

`composer.compose_partial_model_process` puts the steps together into a
`tff.learning.templates.LearningProcess` that carries the aggregator's and
the finalizer's states between rounds (so stateful aggregators such as
`IndexedSlicesClippingFactory` or TFF's robust and DP aggregators compose);
`composer.build_split_aggregator` aggregates an update with dense and
IndexedSlices parts, each with its own aggregator.
"""

from tff_nlp.aggregators.indexed_slices import Divisor
from tff_nlp.aggregators.indexed_slices import IndexedSlicesClippingFactory
from tff_nlp.aggregators.indexed_slices import indexed_slices_type
from tff_nlp.aggregators.indexed_slices import is_indexed_slices_type
from tff_nlp.aggregators.indexed_slices import IndexedSlicesMeanFactory
from tff_nlp.aggregators.indexed_slices import IndexedSlicesSumFactory
from tff_nlp.aggregators.indexed_slices import to_dense
from tff_nlp.templates.partial_model_composer import build_split_aggregator
from tff_nlp.templates.partial_model_composer import DENSE
from tff_nlp.templates.partial_model_composer import compose_partial_model_process
from tff_nlp.algorithms.partial_models.local_vocabulary import bag_to_sparse
from tff_nlp.algorithms.partial_models.local_vocabulary import block_rows
from tff_nlp.algorithms.partial_models.local_vocabulary import client_keys
from tff_nlp.algorithms.partial_models.local_vocabulary import ClientKeys
from tff_nlp.algorithms.partial_models.local_vocabulary import example_counts
from tff_nlp.algorithms.partial_models.local_vocabulary import PAD_KEY
from tff_nlp.algorithms.partial_models.local_vocabulary import sparse_to_bag
from tff_nlp.algorithms.partial_models.local_vocabulary import to_local_bag
from tff_nlp.algorithms.partial_models.local_vocabulary import to_local_ids
from tff_nlp.algorithms.partial_models.local_vocabulary import top_blocks
from tff_nlp.algorithms.partial_models.local_vocabulary import top_keys
from tff_nlp.algorithms.partial_models.selection import build_row_selection
from tff_nlp.algorithms.partial_models.selection import stack_selected_rows
from tff_nlp.templates.delta_finalizer import build_delta_finalizer
