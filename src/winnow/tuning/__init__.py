"""``winnow tune``: which method, which settings and which model per agent role give the best answers
on the user's questions, at what cost, measured honestly (docs/tuning.md).

:mod:`.space` reads and checks the search space, :mod:`.configuration` is one point of it,
:mod:`.objectives` scores a question and prices it, :mod:`.measure` asks a configuration questions
through the :class:`~winnow.pipeline.Pipeline`, :mod:`.halving` decides which configurations go on to
more questions, :mod:`.study` runs the search over an Optuna study, :mod:`.report` confirms and
reports it, :mod:`.runfile` writes a configuration as a run file.
"""
