"""Evaluation metrics and their intervals.

`text2sql`: exact match (the Lorar paper's metric) and SQLite execution
accuracy of predicted SQL, per client with MacroAvg and MicroAvg
(`text2sql.evaluate`; not exported as `metrics.evaluate`, a name that reads
as a general or `tff.learning` evaluation).
`sql_execution`: SQL run read-only, with time and row limits, on the
clients' SQLite databases (for execution accuracy).
`bleu`: SacreBLEU corpus BLEU of translations (with its signature) and a
per-domain BLEU table beside a paper's numbers.
`continual`: continual-learning evaluation (macro-F1, average accuracy,
forgetting and backward transfer of an accuracy matrix, heatmaps, and the
FedSeIT methods x datasets table with the average gain over baselines).
`intervals`: 95 % intervals of results: Student-t over seeds, and the
verdict of a difference of two methods ('no difference', 'A higher',
'B higher'; the one rule of every page, `intervals.comparison_verdict`).
`bootstrap`: a paired, client-stratified bootstrap over test examples
(optionally also over seeds) of MacroAvg, MicroAvg and per-client accuracy
and of a difference of two methods (its names are also reachable as
`intervals.<name>`).
"""

from tff_nlp.metrics.bleu import BleuResult
from tff_nlp.metrics.bleu import bleu_table_markdown
from tff_nlp.metrics.bleu import corpus_bleu
from tff_nlp.metrics import bootstrap
from tff_nlp.metrics import continual
from tff_nlp.metrics import intervals
from tff_nlp.metrics import sql_execution
from tff_nlp.metrics.sql_execution import connect_read_only
from tff_nlp.metrics.sql_execution import execute_select
from tff_nlp.metrics.sql_execution import find_databases
from tff_nlp.metrics.sql_execution import QueryError
from tff_nlp.metrics import text2sql
from tff_nlp.metrics.text2sql import ClientAccuracies
from tff_nlp.metrics.text2sql import exact_match
from tff_nlp.metrics.text2sql import execution_match
from tff_nlp.metrics.text2sql import has_top_level_order_by
from tff_nlp.metrics.text2sql import normalize_sql
from tff_nlp.metrics.text2sql import results_equal
from tff_nlp.metrics.text2sql import Text2SqlEvaluation
