"""The public names of the fine-tuning tasks, from the modules that define them.

`task` (the `Task` interface, `InputExample`, `EvalSet`), `sentence`
(`SentenceTask`), `glue` (GLUE specs and `GlueTask`), `text_classification`,
`squad.task` (`SquadTask`), `tagging` (`TaggingTask`), `encoding`, `readers`, `tfds_input` and `registry`
(`get_task`, `register_task`).

Example:

>>> import os, tempfile
>>> d = tempfile.mkdtemp()
>>> _ = open(os.path.join(d, "dev.tsv"), "w").write("sentence\\tlabel\\ngood film\\t1\\nbad film\\t0\\n")
>>> task = get_task("SST-2", data_dir=d)
>>> [(e.text_a, e.label) for e in task.get_examples("dev")]
[('good film', '1'), ('bad film', '0')]
>>> task.main_metric, task.metric_names
('accuracy', ('accuracy',))
"""

from electra_tf.finetuning.encoding import encode_pairs, truncate_pair
from electra_tf.finetuning.glue import GLUE_SPECS, GLUE_TASKS, Columns, GlueSpec, GlueTask, parse_glue_rows
from electra_tf.finetuning.readers import read_delimited, read_tsv_rows, resolve_column
from electra_tf.finetuning.registry import get_task, register_task, task_names
from electra_tf.finetuning.sentence import SentenceTask
from electra_tf.finetuning.squad.task import SquadTask
from electra_tf.finetuning.tagging import TaggingTask
from electra_tf.finetuning.task import EvalSet, InputExample, Task
from electra_tf.finetuning.text_classification import TextClassificationTask
from electra_tf.finetuning.tfds_input import read_tfds_examples, tfds_split_name

__all__ = ["Columns", "EvalSet", "GLUE_SPECS", "GLUE_TASKS", "GlueSpec", "GlueTask", "InputExample", "SentenceTask",
           "SquadTask", "TaggingTask", "Task", "TextClassificationTask", "encode_pairs", "get_task", "parse_glue_rows",
           "read_delimited", "read_tfds_examples", "read_tsv_rows", "register_task", "resolve_column",
           "task_names", "tfds_split_name", "truncate_pair"]
