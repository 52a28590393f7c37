"""run_pretraining.py's command-line flags, read through `absl.flags.FLAGS`.

run_pretraining.py calls `define_flags()` after `use_onednn_kernels()` and adopts these flags as its own, so
`python run_pretraining.py --help` lists them. Defined by a call, not on import: importing the module (its
doctests, a tool reading it) defines nothing, so it cannot clash with another script's flags in one process.
"""

from absl import flags

from electra_tf import objective_registry
from electra_tf.config import MODEL_SIZES
from electra_tf.options import (EXECUTION_HELP, INPUT_SHARDINGS, PRECISIONS, STRATEGIES, TrainOptions, default,
                                define_execution_flags)


def define_flags() -> None:
    """Defines the script's flags in absl's global registry (once per process)."""
    flags.DEFINE_enum("model_size", None, list(MODEL_SIZES),
                      "Model size from electra_tf/config.py (default: tiny for the demo, else small).")
    flags.DEFINE_string("data_dir", None, "Directory of TFRecord shards + manifest.json from data_prep. "
                        "Unset: build and use the offline demo corpus.")
    flags.DEFINE_string("train_text", None, "Instead of --data_dir: train straight from raw text, GLOB[,GLOB...] of "
                        "plain-text (blank-line separated documents) or WikiExtractor files, split, tokenised with "
                        "--vocab_file and packed as data_prep does, in tf.data (electra_tf/training/text_input.py).")
    flags.DEFINE_string("vocab_file", None, "With --train_text: the WordPiece vocab, or a SentencePiece .model "
                        "(python -m data_prep.build_vocab --model_type=unigram|bpe); its size is the model's vocab_size "
                        "unless --hparams sets one.")
    flags.DEFINE_bool("do_lower_case", default(TrainOptions, "do_lower_case"), "With --train_text and a WordPiece "
                      "vocab: lower-case and strip accents (uncased vocab), as data_prep's --do_lower_case (a "
                      "SentencePiece model normalises by its own rules).")
    flags.DEFINE_float("eval_fraction", default(TrainOptions, "eval_fraction"), "With --train_text: documents held "
                       "out by data_prep's rule (electra_tf/text/held_out.py) are not trained on; the held-out evaluation "
                       "runs on them unless --eval_data_dir is set.")
    flags.DEFINE_string("model_dir", None, "Checkpoints, TensorBoard logs and the export go here.")
    flags.DEFINE_integer("num_train_steps", None, "Total training steps (default: the size's value).")
    flags.DEFINE_integer("num_warmup_steps", None, "Linear warm-up steps.")
    flags.DEFINE_integer("train_batch_size", None, "Global batch size (split over replicas).")
    flags.DEFINE_float("learning_rate", None, "Peak learning rate.")
    flags.DEFINE_integer("max_seq_length", None, "Sequence length; must match the shards.")
    flags.DEFINE_string("hparams", None, "JSON object or JSON file of ElectraConfig overrides.")
    flags.DEFINE_enum("objective", None, list(objective_registry.names()),
                      "rtd = ELECTRA; mlm = BERT-style masked LM only; electric = Electric; the others are the "
                      "paper's ablations (see electra_tf/config.py; the registered objectives: "
                      "electra_tf/objective_registry.py).")
    flags.DEFINE_integer("gradient_accumulation_steps", None, EXECUTION_HELP["gradient_accumulation_steps"])
    flags.DEFINE_enum("optimizer", None, ["adamw", "lamb"], "adamw (official; default) or lamb (large batches).")
    flags.DEFINE_enum("strategy", "auto", STRATEGIES,
                      "tf.distribute strategy. multi_worker takes the cluster from TF_CONFIG or --worker_hosts.")
    flags.DEFINE_list("worker_hosts", None, "multi_worker without TF_CONFIG: every worker's host:port, the same "
                      "list on every worker (the first is the chief); sets TF_CONFIG. Implies --strategy=multi_worker.")
    flags.DEFINE_integer("task_index", None, "With --worker_hosts: this worker's index in the list (0 = chief).")
    flags.DEFINE_float("collective_timeout_seconds", 0, "multi_worker: a collective (all-reduce) that waits longer "
                       "than this for another worker fails, and the run exits with an error, instead of hanging on a "
                       "worker that is alive but stuck (a dead worker is detected anyway, by the coordination "
                       "service's heartbeats, within ~10 s). 0 = off. For debugging only: TensorFlow keeps a thread "
                       "per collective for this long (there are dozens per step), and it must exceed the longest "
                       "pause of a worker, e.g. the chief's export.")
    flags.DEFINE_enum("input_sharding", default(TrainOptions, "input_sharding"), INPUT_SHARDINGS,
                      "multi_worker: batch = every worker reads all "
                      "shards and takes its slice of each global batch (the batches, losses and resume of one "
                      "process, with any number of workers); file = worker i reads shards i, i+N, ... only (1/N of "
                      "the reading; the data order depends on N).")
    flags.DEFINE_string("data_service", None, "grpc://HOST:PORT of a tf.data service dispatcher (python -m "
                        "electra_tf.training.data_service): its workers run the input pipeline over --data_dir "
                        "(readable by them at the same path), each shard file read by one worker per epoch (DYNAMIC "
                        "sharding; the order is not reproducible). Checkpoints then hold no input position: a resume "
                        "is not exact (docs/distributed.md).")
    flags.DEFINE_string("tpu", None, "TPU name or grpc:// address (with --strategy=tpu or auto).")
    flags.DEFINE_enum("mixed_precision", default(TrainOptions, "mixed_precision"), list(PRECISIONS),
                      "fp16 uses dynamic loss scaling.")
    define_execution_flags(flags)
    flags.DEFINE_integer("save_checkpoints_steps", default(TrainOptions, "save_checkpoints_steps"),
                         "Checkpoint every this many steps.")
    flags.DEFINE_integer("keep_checkpoint_max", default(TrainOptions, "keep_checkpoint_max"), "Checkpoints kept.")
    flags.DEFINE_integer("log_steps", default(TrainOptions, "log_steps"), "Log metrics every this many steps.")
    flags.DEFINE_integer("steps_per_loop", default(TrainOptions, "steps_per_loop"), "Steps per tf.function call.")
    flags.DEFINE_integer("seed", default(TrainOptions, "seed"),
                         "Seed for initialisation, data order, masking and sampling.")
    flags.DEFINE_integer("shuffle_buffer", default(TrainOptions, "shuffle_buffer"),
                         "Example shuffle buffer (saved in checkpoints).")
    flags.DEFINE_string("init_checkpoint", None, "Start from this export/run (continued pre-training).")
    flags.DEFINE_bool("phase2", False, "Phase 2 of the run in --model_dir (BERT's 128-then-512 recipe): train on "
                      "--data_dir's shards (--max_seq_length defaults to theirs) with this --train_batch_size, "
                      "--num_train_steps, --num_warmup_steps and --learning_rate (unset: phase 1's; every other "
                      "hyper-parameter is phase 1's recorded one), starting from phase 1's model and optimizer state at "
                      "step 0, in <model_dir>/phase2/ (phase 1's files stay as they are). The same command resumes "
                      "phase 2.")
    flags.DEFINE_integer("stop_after_steps", None, "Stop this invocation at this step (resume later).")
    flags.DEFINE_bool("export_only", False, "Export the newest checkpoint of --model_dir and exit.")
    flags.DEFINE_bool("skip_nonfinite_steps", default(TrainOptions, "skip_nonfinite_steps"),
                      "Skip (and count) steps whose loss or gradient norm is "
                      "NaN/Inf instead of stopping there.")
    flags.DEFINE_bool("skip_corrupt_records", default(TrainOptions, "skip_corrupt_records"),
                      "Go on past a corrupt input record instead of stopping there. The reader gives up on the rest "
                      "of that shard; every skipped record is counted (a warning naming the shard and record, the "
                      "skipped_records scalar, one line at the end). Needs the shards' record counts (data_prep "
                      "records them).")
    flags.DEFINE_string("eval_data_dir", None, "Held-out data to evaluate on (a data_prep directory: its "
                        "eval_data.tfrecord-* shards if it has any, else all its shards). Default: the held-out shards of "
                        "--data_dir (data_prep --eval_fraction), if any; none = no evaluation.")
    flags.DEFINE_integer("eval_every_steps", None, "Evaluate every this many steps (default: --save_checkpoints_steps); "
                         "0 = only at the end. Results: <model_dir>/eval (TensorBoard) and eval_log.jsonl.")
    flags.DEFINE_integer("eval_batches", default(TrainOptions, "eval_batches"),
                         "Held-out batches per evaluation: always the same ones, with the same masks and samples "
                         "(0 = no evaluation).")
    flags.DEFINE_integer("eval_batch_size", None, "Examples per evaluation batch (default: --train_batch_size).")
    flags.DEFINE_bool("do_eval", False, "Evaluate the newest checkpoint of --model_dir on the held-out data and exit "
                      "(no training); the same outputs as evaluation during training.")
    flags.DEFINE_bool("eval_all_checkpoints", False, "With --do_eval: every checkpoint kept in --model_dir, oldest first.")
    flags.DEFINE_integer("num_cpu_devices", None, "Split the CPU into this many logical devices (testing).")
