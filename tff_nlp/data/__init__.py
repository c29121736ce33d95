"""Readers of the datasets in `shared/data` and federated splits of them."""

from tff_nlp.data.partition import dirichlet_label_skew
from tff_nlp.data.partition import Partition
from tff_nlp.data.text_classification import DATA_DIR_ENV_VAR
from tff_nlp.data.text_classification import find_data_dir
from tff_nlp.data.text_classification import load_dataset
from tff_nlp.data.text_classification import read_tsv
from tff_nlp.data.text_classification import Split
from tff_nlp.data.text_classification import TextClassificationData
