"""The ``winnow`` commands, a module per group; :mod:`winnow.cli` imports the one a command line
names, or all of them (see there)."""
