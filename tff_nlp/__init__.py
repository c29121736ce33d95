"""tff_nlp: TensorFlow Federated computations for federated NLP.

Subpackages:
  algorithms  FedAvg / FedOPT / FedProx with Lorar-family client weighting.
  runtime     TFF execution contexts with an owned, always-stopped worker.
  data        Readers of the datasets in ../shared/data.
  models      Keras models wrapped as `tff.learning` models.
"""

from tff_nlp import algorithms
from tff_nlp import analysis
from tff_nlp import runtime

__version__ = '0.1.0'
