"""Trains a SentencePiece model in a process of its own (a script, not a module).

Usage: python _sentencepiece_train.py SPEC_JSON MODEL_OUT

SPEC_JSON holds {"sentences": [...], "options": {...}}, the texts and the
keyword arguments of `sentencepiece.SentencePieceTrainer.train`; the trained
model proto is written to MODEL_OUT. Exit status 2 with the trainer's message
on stderr if SentencePiece rejects the input.

Why a separate process: SentencePiece bundles its own copy of Abseil's flags.
In a process that has loaded TensorFlow, its trainer can call into
TensorFlow's Abseil instead and crash with SIGSEGV in
`GetRandomGeneratorSeed` (google/sentencepiece#813); whether it does depends
on what ran before. This script imports nothing but SentencePiece, so it must
not import tff_nlp (whose package imports TensorFlow).
"""

import json
import sys

import sentencepiece


def main(spec_path: str, model_path: str) -> int:
  with open(spec_path, encoding='utf-8') as f:
    spec = json.load(f)
  try:
    with open(model_path, 'wb') as model:
      sentencepiece.SentencePieceTrainer.train(
          sentence_iterator=iter(spec['sentences']),
          model_writer=model,
          **spec['options'],
      )
  except RuntimeError as e:
    print(e, file=sys.stderr)
    return 2
  return 0


if __name__ == '__main__':
  if len(sys.argv) != 3:
    sys.exit(f'usage: {sys.argv[0]} SPEC_JSON MODEL_OUT')
  sys.exit(main(sys.argv[1], sys.argv[2]))
