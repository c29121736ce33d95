"""The tiny text-to-SQL setting of the experiment's tests, shared by them.

Two clients on real data, a few examples each, and a 1+1-layer d = 16
seq2seq model: the pipeline runs in seconds; exact match stays near 0.
"""

from tff_nlp.models import seq2seq
from apps.text2sql import task as text2sql_task

CLIENTS = ('geography', 'imdb')
DATA = text2sql_task.DataConfig(
    clients=CLIENTS, schema_columns=False, vocabulary_size=400,
    max_source_length=48, max_target_length=96, max_train_examples=6,
    max_eval_examples=3)
MODEL = seq2seq.Seq2SeqConfig.from_preset(
    'small', num_encoder_layers=1, num_decoder_layers=1, hidden_dim=16,
    num_heads=2, intermediate_dim=32)
