"""Keras models wrapped as `tff.learning` models, and their input encodings."""

from tff_nlp.models.text_classifier import build_keras_model
from tff_nlp.models.text_classifier import build_model_fn
from tff_nlp.models.text_classifier import input_spec
from tff_nlp.models.text_classifier import TextClassifierSpec
from tff_nlp.models.vocabulary import OOV_ID
from tff_nlp.models.vocabulary import PAD_ID
from tff_nlp.models.vocabulary import tokenize
from tff_nlp.models.vocabulary import Vocabulary
