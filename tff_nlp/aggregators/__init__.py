"""Aggregators: TFF `AggregationFactory`s and the weights they use.

`weighting`: the client weightings (`Weighting`: uniform, num_examples and
the Lorar family) and each client's raw weight.
`weight_cap`: `WeightShareCapFactory`, a cap on any client's share of a
round's weight, wrapped around any weighted aggregator.
`trimmed_mean`: `TrimmedMeanFactory`, a coordinate-wise trimmed weighted
mean that drops the most extreme clients' values of every coordinate.
`delta_aggregation`: `DeltaAggregator`, the model-delta aggregation every
builder shares (weights, non-finite clients, measurements).
`indexed_slices`: sparse (IndexedSlices) sum, mean and clipping, for partial
models.
`factory`: `AggregationConfig` and `build_model_aggregator`, the aggregator
a run's flags describe (mean, trimmed mean, DP, secure sum, weight cap).
"""

from tff_nlp.aggregators import delta_aggregation
from tff_nlp.aggregators import factory
from tff_nlp.aggregators import indexed_slices
from tff_nlp.aggregators import trimmed_mean
from tff_nlp.aggregators import weight_cap
from tff_nlp.aggregators import weighting
from tff_nlp.aggregators.factory import AggregationConfig
from tff_nlp.aggregators.factory import build_model_aggregator
from tff_nlp.aggregators.indexed_slices import Divisor
from tff_nlp.aggregators.indexed_slices import IndexedSlicesClippingFactory
from tff_nlp.aggregators.indexed_slices import IndexedSlicesMeanFactory
from tff_nlp.aggregators.indexed_slices import IndexedSlicesSumFactory
from tff_nlp.aggregators.trimmed_mean import TrimmedMeanFactory
from tff_nlp.aggregators.weight_cap import WeightShareCapFactory
from tff_nlp.aggregators.weighting import Weighting
