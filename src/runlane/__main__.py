"""``python -m runlane`` runs the CLI."""

from runlane.cli.main import main

if __name__ == "__main__":
    main()
