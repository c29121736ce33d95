"""Baselines that learn nothing, scored like the trained models.

`template_retrieval`: text-to-SQL by the SQL template of the most similar
training question of the same client (TF-IDF cosine), filled with the test
question's values; `evaluate_clients` scores it on the paper's splits.
"""

from tff_nlp.baselines import template_retrieval
from tff_nlp.baselines.template_retrieval import evaluate_clients
from tff_nlp.baselines.template_retrieval import predict_clients
from tff_nlp.baselines.template_retrieval import TemplateRetrieval
from tff_nlp.baselines.template_retrieval import Tfidf
