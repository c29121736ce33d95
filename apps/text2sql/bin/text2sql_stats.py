"""Prints the statistics of the text-to-SQL clients (Lorar paper, Table 1).

  python -m apps.text2sql.bin.text2sql_stats --data_dir=../shared/data
  python -m apps.text2sql.bin.text2sql_stats --format=markdown

Prints one JSON object keyed by client name (`--format=json`) or a markdown
table, one row per client (`--format=markdown`). The numbers and how they are
computed: `tff_nlp.data.text2sql_stats`.
"""

import json

from absl import app
from absl import flags

from apps.common import binary as common
from tff_nlp.data import text2sql
from tff_nlp.data import text2sql_stats

_CLIENTS = flags.DEFINE_list(
    'clients', list(text2sql.CLIENTS),
    f'Clients, in table order; from {list(text2sql.CLIENTS)}.')
_FORMAT = flags.DEFINE_enum(
    'format', 'json', ['json', 'markdown'], 'Output format.')


def main(argv):
  if len(argv) > 1:
    raise app.UsageError(f'Unexpected arguments: {argv[1:]}')
  stats = text2sql_stats.load_stats(names=_CLIENTS.value,
                                    data_dir=common.DATA_DIR.value)
  if _FORMAT.value == 'markdown':
    print(text2sql_stats.to_markdown(stats), end='')
  else:
    print(json.dumps(text2sql_stats.to_json_dict(stats), indent=2))


if __name__ == '__main__':
  common.run(main)
