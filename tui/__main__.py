import sys

from swarmnode.cli import main

sys.exit(main(["tui", *sys.argv[1:]]))
