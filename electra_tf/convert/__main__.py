"""Entry point of `python -m electra_tf.convert` (see `electra_tf.convert.cli`)."""

import sys

from electra_tf.runtime import use_onednn_kernels

use_onednn_kernels()  # before TensorFlow is imported (the package's __init__ imports it lazily)

from electra_tf.convert.cli import main  # noqa: E402

if __name__ == "__main__":
    sys.exit(main())
