"""Entry point of `python -m electra_tf.convert` (see `electra_tf.convert.cli`)."""

import sys

from electra_tf.convert.cli import main

if __name__ == "__main__":
    sys.exit(main())
