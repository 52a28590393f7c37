"""The ELECTRA model in Keras 3: layers, embeddings (+ GDES), the transformer layer, encoders, heads,
masking, the pre-trainer and its FLOP counts; `execution` resolves how the layers compute.

Import the module you need (`from electra_tf.model.encoder import ElectraEncoder`); this package
imports nothing.
"""
