"""winnow report: Holm's correction when many runs are compared with vanilla, and each run's index by
its absolute path and content address (a relative --index says nothing once the report is moved)."""

from __future__ import annotations

import pytest
from run_records import line
from run_records import metrics as run_metrics

from winnow.evaluation.paired import holm, sign_test_p
from winnow.evaluation.report import LoadedRun, Report, index_address, paired_table, runs_section


def test_holm_steps_down_and_keeps_the_order():
    # sorted 0.01, 0.02, 0.04 times 3, 2, 1 -> 0.03, 0.04, 0.04 (made monotone), given back in order
    assert holm([0.04, 0.01, 0.02]) == pytest.approx([0.04, 0.03, 0.04])
    assert holm([0.5, 0.9]) == [1.0, 1.0]  # capped at 1
    assert holm([0.2]) == [0.2] and holm([]) == []


def run(tmp_path, name, method, accuracies, config=None):
    records = [line(id=qid, scores={"accuracy": acc, "em": acc, "f1": acc})
               for qid, acc in zip("abcdefgh"[:len(accuracies)], accuracies, strict=True)]
    return LoadedRun(tmp_path / name, config or {}, run_metrics(method=method, label=name), records)


def test_two_runs_keep_the_plain_p_and_more_say_holm(tmp_path):
    vanilla = run(tmp_path, "plain", "vanilla", [0, 0, 0, 0, 0, 0, 1, 1])
    ranked = run(tmp_path, "ranked", "rankrag", [1, 1, 1, 1, 1, 1, 1, 1])
    agents = run(tmp_path, "agents", "mainrag", [1, 1, 1, 0, 0, 0, 1, 1])
    alone = paired_table([vanilla, ranked])
    assert "| p (Acc.) |" in alone and "Holm" not in alone
    assert f"| {sign_test_p(6, 0):.2f} |" in alone.splitlines()[2]
    table = paired_table([vanilla, ranked, agents])
    assert "| p Holm (Acc.) |" in table and "Holm's step-down method over the 2 comparisons" in table
    ranked_row = next(row for row in table.splitlines() if row.startswith("| ranked"))
    agents_row = next(row for row in table.splitlines() if row.startswith("| agents"))
    p_ranked, p_agents = holm([sign_test_p(6, 0), sign_test_p(3, 0)])
    assert f"| {p_ranked:.2f} |" in ranked_row and f"| {p_agents:.2f} |" in agents_row
    assert p_ranked > sign_test_p(6, 0)  # adjusted upward


def test_the_run_list_names_the_index_by_absolute_path_and_content(tmp_path):
    identity = {"index": {"source_checksum": "sha256:abc", "counts": {"passages": 10033}}}
    config = {"identity": identity, "index_dir": str(tmp_path / "wiki-index"),
              "command": ["winnow", "eval", "--index", "wiki-index"]}
    first = run(tmp_path, "plain", "vanilla", [0, 1], config=config)
    moved = run(tmp_path, "copy", "vanilla", [0, 1], config={**config, "index_dir": "/elsewhere/wiki-index"})
    assert index_address(first) == index_address(moved) and len(index_address(first)) == 12
    changed = run(tmp_path, "other", "vanilla", [0, 1], config={
        **config, "identity": {"index": {**identity["index"], "source_checksum": "sha256:def"}}})
    assert index_address(changed) != index_address(first)
    text = runs_section(Report([first], tmp_path / "report.md"))
    assert f"index `{tmp_path / 'wiki-index'}` (content sha256 {index_address(first)}…, 10,033 passages)" in text
    assert f"`{(tmp_path / 'plain').resolve()}`" in text


def test_a_sweep_folder_stands_for_its_runs(tmp_path):
    from winnow.evaluation.report import with_sweeps_opened

    for name in ("judge_n=0", "judge_n=1"):
        (tmp_path / "sweep" / name).mkdir(parents=True)
        (tmp_path / "sweep" / name / "config.json").write_text("{}")
    (tmp_path / "sweep" / "sweep.json").write_text("{}")
    (tmp_path / "single").mkdir()
    (tmp_path / "single" / "config.json").write_text("{}")
    assert with_sweeps_opened([tmp_path / "single", tmp_path / "sweep"]) == [
        tmp_path / "single", tmp_path / "sweep" / "judge_n=0", tmp_path / "sweep" / "judge_n=1"]
    assert with_sweeps_opened([tmp_path / "nothing"]) == [tmp_path / "nothing"]  # refused by load_run, naming it


def test_csv_and_latex_hold_the_markdown_tables_and_notes(tmp_path):
    import csv

    from winnow.evaluation.export import export, read_tables

    vanilla = run(tmp_path, "plain", "vanilla", [0, 0, 0, 0, 0, 0, 1, 1])
    ranked = run(tmp_path, "ranked_50%", "rankrag", [1, 1, 1, 1, 1, 1, 1, 1])
    agents = run(tmp_path, "agents", "mainrag", [1, 1, 1, 0, 0, 0, 1, 1])
    markdown = ("# Evaluation report\n\n## Against plain RAG, question by question\n\nIntro.\n\n"
                + paired_table([vanilla, ranked, agents]) + "\n\n## Plots\n\n![a](a.png)\n")
    [table] = read_tables(markdown)
    assert table.heading == "Against plain RAG, question by question" and table.header[5] == "p Holm (Acc.)"
    assert [row[0] for row in table.rows] == ["ranked_50%", "agents"] and table.align[:3] == ["l", "l", "r"]
    assert any("Holm's step-down method" in note for note in table.notes)

    out = tmp_path / "report.md"
    [written] = export(markdown, out, "csv", "Evaluation report")
    assert written == tmp_path / "report-against-plain-rag-question-by-question.csv"
    with written.open(encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    assert rows[0] == table.header and rows[1:] == table.rows

    [tex] = export(markdown, out, "latex", "Evaluation report")
    text = tex.read_text(encoding="utf-8")
    assert tex == tmp_path / "report.tex" and "\\begin{tabular}{llrrrrrrrr}" in text
    assert "ranked\\_50\\% & plain & 8 &" in text and "Holm's step-down method" in text
    assert export(markdown, out, "markdown", "Evaluation report") == []
