"""Readers of the datasets in `shared/data` and federated splits of them.

`data_root` finds the `shared/data` folder (the one search order of every
reader); `vocabulary` builds word vocabularies from training texts.
`text2sql` reads the text-to-SQL clients; their queries and the filling of
their variables are module `text2sql_queries` (its names also reachable as
`text2sql.<name>`). `continual_tasks` builds continual task sequences, cut
with `stratified` samples. Names that only make sense with their dataset's
module (`text2sql.CLIENTS`, `text2sql.Example`, `text_classification.Split`)
are reached through it.
"""

from tff_nlp.data import continual_tasks
from tff_nlp.data.data_root import DATA_DIR_ENV_VAR
from tff_nlp.data.data_root import find_data_dir
from tff_nlp.data import nmt
from tff_nlp.data.nmt import find_nmt_dir
from tff_nlp.data.nmt import list_domains
from tff_nlp.data.nmt import load_domains
from tff_nlp.data.nmt import ParallelCorpus
from tff_nlp.data.nmt import read_parallel
from tff_nlp.data.partition import dirichlet_label_skew
from tff_nlp.data.partition import Partition
from tff_nlp.data import tags
from tff_nlp.data import stratified
from tff_nlp.data import text2sql
from tff_nlp.data.text2sql import FoldSplit
from tff_nlp.data.text2sql import load_client
from tff_nlp.data.text2sql import load_clients
from tff_nlp.data.text2sql import model_input
from tff_nlp.data.text2sql import PAPER_FOLDS
from tff_nlp.data.text2sql import Query
from tff_nlp.data.text2sql import read_queries
from tff_nlp.data.text2sql import read_schema
from tff_nlp.data.text2sql import Schema
from tff_nlp.data.text2sql import seeded_folds
from tff_nlp.data.text2sql import Sentence
from tff_nlp.data.text2sql import serialize_schema
from tff_nlp.data.text2sql import Table
from tff_nlp.data.text2sql import Text2SqlClientData
from tff_nlp.data import text2sql_queries
from tff_nlp.data.text2sql_source import find_text2sql_dir
from tff_nlp.data.text2sql_stats import ClientStats
from tff_nlp.data.text2sql_stats import load_stats
from tff_nlp.data.text_classification import load_dataset
from tff_nlp.data.text_classification import read_tsv
from tff_nlp.data.text_classification import TextClassificationData
from tff_nlp.data import vocabulary
from tff_nlp.data.vocabulary import tokenize
from tff_nlp.data.vocabulary import Vocabulary
