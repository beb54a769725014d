"""A run's TREC files made line by line as questions are kept are the files made all at the end.

The records are variants of a real MAIN-RAG line (tests/run_files/answers.jsonl): other ids, one
with a stage missing, one whose passage is listed twice, one whose id cannot go in a TREC file.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from winnow.datasets.trec import read_run
from winnow.evaluation.run_files import RunFiles
from winnow.evaluation.schema import QuestionRecord

LINE = Path(__file__).parent / "run_files" / "answers.jsonl"


def records() -> list[QuestionRecord]:
    real = QuestionRecord.from_json(json.loads(LINE.read_text().splitlines()[0]))
    assert len(real.stages) >= 2 and len(real.first_stage.ids) >= 3
    made = [dataclasses.replace(real, id=f"q{number}") for number in range(6)]
    made[2] = dataclasses.replace(made[2], stages=made[2].stages[:1])  # a stage that did not run for it
    twice = made[3].first_stage
    made[3] = dataclasses.replace(made[3], first_stage=dataclasses.replace(
        twice, ids=[twice.ids[0], *twice.ids], scores=None))
    return made


def rows(record: QuestionRecord) -> list[str]:
    return ["first_stage", *(entry.stage for entry in record.stages), "final"]


def test_lines_made_as_questions_are_kept_are_the_lines_made_at_the_end(tmp_path):
    kept, at_end = tmp_path / "kept", tmp_path / "end"
    kept.mkdir()
    at_end.mkdir()
    made = records()
    files = RunFiles(kept, "mainrag")
    for record in made[::2]:  # the others as if read back by a resumed run: made only when written
        files.add(record)
    assert files.write(made, rows(made[0])) == ""
    assert RunFiles(at_end, "mainrag").write(made, rows(made[0])) == ""
    for row in rows(made[0]):
        assert (kept / f"{row}.trec").read_bytes() == (at_end / f"{row}.trec").read_bytes()
    first = read_run(kept / "first_stage.trec")
    assert list(first) == [r.id for r in made]
    assert [doc for doc, _ in first["q3"]] == made[3].first_stage.ids[1:]  # its first place, rank scores
    assert [score for _, score in first["q3"]] == [float(len(first["q3"]) - rank) for rank in range(len(first["q3"]))]
    second = rows(made[0])[2]
    assert "q2" not in read_run(kept / f"{second}.trec")  # no line rather than a guess


def test_an_id_that_cannot_be_written_is_named_whether_its_lines_were_made_early_or_late(tmp_path):
    made = records()
    made[1] = dataclasses.replace(made[1], id="q 1")
    early = RunFiles(tmp_path, "mainrag")
    early.add(made[1])
    said = early.write(made, rows(made[0]))
    assert said == RunFiles(tmp_path, "mainrag").write(made, rows(made[0]))
    assert "query id 'q 1' cannot be written to a TREC file" in said and "first_stage.trec" in said
    assert not (tmp_path / "first_stage.trec").exists()
