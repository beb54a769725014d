"""Command groups that live in their own modules (data, eval, report, serve, train).

Each module registers its commands on ``winnow.cli.app`` when imported, and imports its heavy
libraries inside the command bodies, so ``winnow --help`` stays fast.
"""

# Modules under winnow/commands/ imported by winnow.cli; add one name per new module.
COMMAND_MODULES: list[str] = ["evaluate", "data", "report", "train", "serve"]
