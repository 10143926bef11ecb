"""python -m paijob.runtime.recipes RECIPE [ARGS]."""

from paijob.runtime.recipes.command import main_and_exit

if __name__ == "__main__":
    main_and_exit()
