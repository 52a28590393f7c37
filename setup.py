"""A shim over pyproject.toml (all metadata is there) for tools that want a setup.py.

Apache Beam ships this project's code to remote workers with ``--setup_file=./setup.py``: it runs
``python setup.py sdist`` and installs the result on every worker (see docs/data.md, "On Apache Beam").
"""

import setuptools

setuptools.setup()
