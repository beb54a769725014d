"""``python -m winnow``: the command line, for when the ``winnow`` script is not on PATH (an MCP
client's config names the interpreter of the environment Winnow is installed in)."""

from .cli import main

if __name__ == "__main__":  # importing the module (as tests that import every module do) runs nothing
    main()
