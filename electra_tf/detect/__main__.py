"""Entry point of `python -m electra_tf.detect` (see `electra_tf.detect.cli`)."""

import sys

from electra_tf.runtime import use_onednn_kernels

use_onednn_kernels()  # TensorFlow is imported later, by load_detector

from electra_tf.detect.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
