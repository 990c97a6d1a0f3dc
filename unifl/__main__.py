"""``python -m unifl`` runs the command line (the same as the ``unifl`` script)."""

from .cli import main

if __name__ == "__main__":
    main()
