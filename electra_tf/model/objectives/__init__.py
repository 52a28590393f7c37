"""The pre-training objectives, one object each over the networks it builds (`base.Objective`).

`base` is the interface and the registry (`register`, `get`, `names`: `electra_tf.objective_registry`);
`mlm` the masked LM alone (BERT), `electra` replaced-token detection and the paper's three ablations,
`electric` Electric's noise-contrastive estimation. Import the module you need; this package imports nothing.
"""
