"""The ``winnow`` commands, a module per group; :mod:`winnow.cli` imports them all (see there)."""
