"""RankRAG instruction tuning: the Stage-II blend and supervised fine-tuning (Yu et al., 2024, §4.1-4.2).

``blend`` builds the unified-format training data from the user's files and from QA sets mined
against a Winnow index; ``sft`` fine-tunes a model on it with transformers, TRL and PEFT (the
``[train]`` extra). Nothing here imports torch at module import time.
"""
