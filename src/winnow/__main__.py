"""``python -m winnow``: the command line, for when the ``winnow`` script is not on PATH (an MCP
client's config names the interpreter of the environment Winnow is installed in)."""

from .cli import main

main()
