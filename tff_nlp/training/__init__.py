"""Resumable training loops from `tff.program` pieces, and their records."""

from tff_nlp.training.loop import CHECKPOINT_DIR
from tff_nlp.training.loop import check_clients_per_round
from tff_nlp.training.loop import ClientDataFn
from tff_nlp.training.loop import EvaluateFn
from tff_nlp.training.loop import LoopConfig
from tff_nlp.training.loop import RoundMetricsFn
from tff_nlp.training.loop import run_training
from tff_nlp.training.loop import sample_clients
from tff_nlp.training.loop import TaskSchedule
from tff_nlp.training.loop import TENSORBOARD_DIR
from tff_nlp.training.loop import TrainingRun
from tff_nlp.training.process_cache import ProcessCache
from tff_nlp.training.release import config_digest
from tff_nlp.training.release import JsonLinesReleaseManager
from tff_nlp.training.release import KEY_FIELD
from tff_nlp.training.release import machine_info
from tff_nlp.training.release import read_json_lines
from tff_nlp.training.release import to_json_value
from tff_nlp.training.release import weights_digest
from tff_nlp.training.release import write_json
from tff_nlp.training.run_dir import check_data_fingerprint
from tff_nlp.training.run_dir import check_output_dir
from tff_nlp.training.run_dir import data_fingerprint
from tff_nlp.training.run_dir import prepare_run_dir
from tff_nlp.training.run_dir import RunDir
from tff_nlp.training.run_dir import write_data_fingerprint
