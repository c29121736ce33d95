#!/bin/sh
# Placeholder for Bazel's coverage tools (see third_party/README.md).
echo "tff_nlp: Bazel's coverage tools (@remote_coverage_tools) are not" \
  "available offline; 'bazel coverage' is not supported here." \
  "Use pytest for coverage." >&2
exit 1
