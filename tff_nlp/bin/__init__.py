"""Command-line entry points (absl binaries), run as `python -m tff_nlp.bin.X`.

Flag presets live in `tff_nlp/bin/flags/<binary>.<preset>.flags`; pass one
with `--flagfile=`.
"""
