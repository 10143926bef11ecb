"""python -m paijob.runtime.recipes RECIPE [ARGS]."""

import sys

from paijob.runtime.recipes.cli import main

if __name__ == "__main__":
    sys.exit(main())
