"""Training: the loop, optimizer, distribution, pre-emption, input pipeline, run lock and the pre-training run.

Import the module you need (`from electra_tf.training import loop`); this package imports nothing.
"""
