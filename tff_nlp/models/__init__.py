"""Keras models wrapped as `tff.learning` models, and their input encodings.

The package-level `build_keras_model`, `build_model_fn` and `input_spec` are
the text classifier's; the seq2seq model's are `seq2seq.build_keras_model`,
`seq2seq_model_fn.build_model_fn` and `seq2seq_inputs.input_spec` (the
seq2seq model is in modules of one concern each: `seq2seq` the config, the
Keras model and its checkpoints; `seq2seq_inputs` the teacher-forcing
batches; `seq2seq_loss` the masked loss and token accuracy;
`seq2seq_model_fn` the `tff.learning` model; `seq2seq_layout` the tensor
groups of dynamic pulling; `seq2seq_decoding` generation).

`dropout_seeds` makes dropout masks a function of (seed, training step), so
runs repeat and resume exactly; the seq2seq and FCL models use it.

`lora` adds LoRA adapters to a built Keras model (`add_lora`, `LoraConfig`)
and freezes the rest, so that a `tff.learning` model of it trains and sends
only the adapters; `merge_lora` folds them back into the kernels for export.
The adapter of one kernel, a Keras layer, is module `lora_adapter`'s
`LoraAdapter` (also reachable as `lora.LoraAdapter`).
`LoraModelFn` (module `lora_model_fn`) is the `model_fn` of federated LoRA:
its model weights are the adapters only, the pre-trained weights being the
frozen initial values of the model's variables.

The seq2seq and subword tokenizer modules and names are imported on first
use: they import keras-nlp, which takes seconds and is not needed by the
text classifier.
"""

from tff_nlp import _lazy

from tff_nlp.models import dropout_seeds
from tff_nlp.models import lora
from tff_nlp.models import lora_adapter
from tff_nlp.models.lora import add_lora
from tff_nlp.models.lora import lora_parameter_count
from tff_nlp.models.lora import LoraConfig
from tff_nlp.models.lora import merge_lora
from tff_nlp.models import lora_model_fn
from tff_nlp.models.lora_model_fn import LoraModelFn
from tff_nlp.models.text_classifier import build_keras_model
from tff_nlp.models.text_classifier import build_model_fn
from tff_nlp.models.text_classifier import input_spec
from tff_nlp.models.text_classifier import TextClassifierSpec

# name -> (module, attribute or None for the module itself).
_LAZY_EXPORTS = {
    'keras_nlp_preset': ('tff_nlp.models.keras_nlp_preset', None),
    'seq2seq': ('tff_nlp.models.seq2seq', None),
    'seq2seq_decoding': ('tff_nlp.models.seq2seq_decoding', None),
    'seq2seq_inputs': ('tff_nlp.models.seq2seq_inputs', None),
    'seq2seq_layout': ('tff_nlp.models.seq2seq_layout', None),
    'seq2seq_loss': ('tff_nlp.models.seq2seq_loss', None),
    'seq2seq_model_fn': ('tff_nlp.models.seq2seq_model_fn', None),
    'subword_tokenizer': ('tff_nlp.models.subword_tokenizer', None),
    'DecodeOutput': ('tff_nlp.models.seq2seq_decoding', 'DecodeOutput'),
    'MaskedSparseCategoricalCrossentropy': (
        'tff_nlp.models.seq2seq_loss', 'MaskedSparseCategoricalCrossentropy'),
    'MaskedTokenAccuracy': (
        'tff_nlp.models.seq2seq_loss', 'MaskedTokenAccuracy'),
    'Seq2SeqConfig': ('tff_nlp.models.seq2seq', 'Seq2SeqConfig'),
    'Seq2SeqTransformer': ('tff_nlp.models.seq2seq', 'Seq2SeqTransformer'),
    'SubwordTokenizer': (
        'tff_nlp.models.subword_tokenizer', 'SubwordTokenizer'),
}


__getattr__, __dir__ = _lazy.lazy_exports(__name__, _LAZY_EXPORTS)
