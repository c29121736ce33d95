"""Experiments: federated training runs on real data, with their reports."""

from tff_nlp.experiments import federated_text
from tff_nlp.experiments import weighting_demo
from tff_nlp.experiments.federated_text import Accuracies
from tff_nlp.experiments.federated_text import ClientDataConfig
from tff_nlp.experiments.federated_text import ClientExamples
from tff_nlp.experiments.federated_text import evaluate
from tff_nlp.experiments.federated_text import FederatedTextClassification
from tff_nlp.experiments.federated_text import prepare_clients
from tff_nlp.experiments.federated_text import train_dataset
from tff_nlp.experiments.weighting_demo import run_weighting_demo
from tff_nlp.experiments.weighting_demo import TrainingConfig
from tff_nlp.experiments.weighting_demo import WEIGHTINGS
from tff_nlp.experiments.weighting_demo import WeightingResult
