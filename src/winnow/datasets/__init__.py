"""Questions, answers and relevance judgments: QA JSONL sets, TREC qrels and run files, and loaders
for the data bundled with Pyserini 0.21.0, BEIR folders and ``ir_datasets``."""

from __future__ import annotations

from .catalog import DatasetSpec, dataset_specs, find_spec, load_dataset
from .dataset import Dataset
from .qa import QAItem, read_qa_jsonl, write_qa_jsonl
from .trec import Qrels, Run, read_qrels, read_run, run_scores, write_qrels, write_run

__all__ = ["Dataset", "DatasetSpec", "QAItem", "Qrels", "Run", "dataset_specs", "find_spec", "load_dataset",
           "read_qa_jsonl", "read_qrels", "read_run", "run_scores", "write_qa_jsonl", "write_qrels", "write_run"]
