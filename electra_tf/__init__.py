"""ELECTRA pre-training and fine-tuning for TensorFlow 2 / Keras 3.

Importing the package (or any module of it) changes no process state: the entry points set the
process up themselves (`electra_tf.runtime.use_onednn_kernels`, before TensorFlow is imported).
"""
