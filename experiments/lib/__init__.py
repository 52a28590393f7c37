"""What several experiments share: the objectives protocol, running its pieces, and the records they leave.

* `protocol`: the shared data, arms, budgets, fine-tuning tasks, a run (arm × pre-training seed), compute at
  equal FLOPs;
* `workdir`: a work folder's layout (pre-training and fine-tuning folders) and its JSON files;
* `runner`: the subprocesses: shards, a watched and stoppable pre-training, cached fine-tuning runs side by side,
  progress lines, the flags every experiment shares;
* `records`: a run's committed record, restoring it into a new work folder, and the scores a report reads.

The library imports `electra_tf` (lazily, inside functions: a report needs no TensorFlow) and
`experiments.provenance`, never an experiment's script or report.
"""
