"""``winnow eval``'s own options (winnow.evaluation.options.EvalOptions): declared once, and every
clash refused in one line naming the options, before anything loads."""

from __future__ import annotations

from pathlib import Path

import pytest

from winnow.errors import WinnowError
from winnow.evaluation.options import EvalOptions
from winnow.run_spec import RunOptions
from winnow.settings import SettingError


@pytest.mark.parametrize(("given", "message"), [
    ({"engine": "spark"}, "--engine 'spark' is not one of local, ray"),
    ({"ray_workers": 2}, "--ray-workers only apply with --engine ray"),
    ({"ray_cpus": 2.0, "engine": "local"}, "--ray-cpus-per-worker only apply with --engine ray"),
    ({"first_stage_run": Path("run.trec"), "sweep": "n=4,8"}, "--run is read with --engine local and without --sweep"),
    ({"first_stage_run": Path("run.trec"), "engine": "ray"}, "--run is read with --engine local"),
    ({"processes": 2, "engine": "ray"}, "--processes 2 runs with --engine local, not with --engine ray"),
    ({"processes": 2, "sweep": "n=4,8"}, "--processes 2 runs with --engine local, not with --sweep"),
    ({"sweep": "n=4,8", "engine": "ray"}, "--sweep runs with --engine local"),
    ({"limit": 0}, "--limit must be at least 1 (got 0)"),
    ({"batch_size": 0}, "--batch-size must be at least 1 (got 0)"),
    ({"relevance_level": 0}, "--relevance-level must be at least 1 (got 0)"),
    ({"engine": "ray", "ray_workers": 0}, "--ray-workers must be at least 1 (got 0)"),
    ({"engine": "ray", "ray_cpus": 0.0}, "--ray-cpus-per-worker must be above 0 (got 0)"),
])
def test_options_that_cannot_go_together_are_refused_naming_them(given, message):
    with pytest.raises(WinnowError) as refused:
        EvalOptions(**given)
    assert message in str(refused.value)


def test_options_that_depend_on_the_run_are_refused_when_it_is_resolved(tmp_path):
    with pytest.raises(WinnowError, match="--processes 2 needs --backend openai"):
        EvalOptions(processes=2).resolve(RunOptions(backend="llama.cpp"))
    with pytest.raises(WinnowError, match="--run and --ann hnsw"):
        EvalOptions(first_stage_run=tmp_path / "run.trec").resolve(RunOptions(retriever="dense", ann="hnsw"))
    with pytest.raises(WinnowError, match="no such file"):
        EvalOptions(first_stage_run=tmp_path / "run.trec").resolve(RunOptions())
    with pytest.raises(SettingError, match="given both by --sweep and by its own flag"):
        EvalOptions(sweep="n=4,8").resolve(RunOptions(n=6))


def test_a_run_file_is_part_of_the_runs_identity(tmp_path):
    run_file = tmp_path / "run.trec"
    run_file.write_text("q1 Q0 d1 1 1.0 x\n")
    resolved = EvalOptions(first_stage_run=run_file).resolve(RunOptions(method="vanilla"))
    assert resolved.spec.first_stage_run.startswith(f"{run_file.resolve()} sha256:")
    assert resolved.run_arguments()["capped"] is False and EvalOptions().cpus_per_worker == 1
