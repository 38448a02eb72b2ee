"""`python -m fleetrl.cli`: the command line, as the processes fleetrl starts run it."""

from fleetrl.cli import main

main()
