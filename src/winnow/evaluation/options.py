"""The options of ``winnow eval`` beyond the run's own, declared once, and the checks between them.

:class:`EvalOptions` is to ``winnow eval`` what :class:`~winnow.run_spec.RunOptions` is to every
run: each field's metadata holds its flag and help, from which :mod:`winnow.commands.common` builds
the command's options, and ``None`` means "not given". Options that cannot go together are refused
when the options are made (:meth:`EvalOptions.__post_init__`), those that depend on the run's
resolved spec by :meth:`EvalOptions.resolve`: all before a model loads or a folder is made.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..errors import WinnowError
from ..run_spec import option

if TYPE_CHECKING:
    from ..run_spec import RunOptions, RunSpec
    from .prices import PriceTable

#: The engines ``--engine`` names (``--processes`` is the local engine's).
ENGINES = ("local", "ray")


@dataclass(frozen=True)
class EvalOptions:
    """Every option of ``winnow eval`` but the run's (method, models, settings: RunOptions)."""

    limit: int | None = option("--limit", help="Ask only L questions (the first L, or a seeded sample "
                                                          "with --seed; raise it later to extend the run).")
    seed: int | None = option("--seed", help="Choose and order the questions by this seed.")
    qrels: Path | None = option("--qrels", help="TREC qrels: adds nDCG@1/5/10, MRR@10, MAP and Recall@k per stage.")
    capped: bool | None = option("--capped", help="Also capped Recall@k (divide by min(k, relevant)).")
    relevance_level: int | None = option("--relevance-level", minimum=1,
                                         help="With --qrels: the lowest grade that counts as relevant for Recall, "
                                              "MRR and MAP (trec_eval's -l) [default: 2 for TREC DL questions, "
                                              "else 1].")
    batch_size: int | None = option("--batch-size", minimum=1,
                                    help="Rarely needed. With a server (--backend openai): at most this many "
                                         "questions in progress at once (each moves to its next stage as its own "
                                         "calls return; by default enough to fill --max-inflight). In process, and "
                                         "per --engine ray worker: questions run together, each stage over the "
                                         "whole batch (default --slots (1) for llama.cpp, 8 for transformers, "
                                         "--max-inflight for a server). Answers are the same either way.")
    engine: str | None = option("--engine", help="local (this process) or ray (the questions shared out over the "
                                                 "workers of a Ray cluster; needs the [ray] extra) [default: local].")
    processes: int | None = option("--processes", minimum=1,
                                   help="--engine local with a server (--backend openai): client processes on this "
                                        "machine sharing the questions and --max-inflight (one core turns answers "
                                        "into prompts only so fast) [default: one per 32 of --max-inflight, at most "
                                        "one per core and per 64 questions].")
    ray_address: str | None = option("--ray-address", help="--engine ray: the cluster's HOST:PORT (default: "
                                                           "RAY_ADDRESS, or a new cluster on this machine).")
    ray_workers: int | None = option("--ray-workers", help="--engine ray: workers, each with its own index and "
                                                           "models [default: one per node].")
    ray_cpus: float | None = option("--ray-cpus-per-worker", help="--engine ray: CPUs each worker holds "
                                                                  "(llama.cpp's threads) [default: 1].")
    prices: Path | None = option("--prices", help="TOML or JSON price table, USD per million prompt and completion "
                                                  "tokens per model: adds the cost in USD (docs/reproducing.md).")
    first_stage_run: Path | None = option("--run", help="A precomputed first stage to use instead of retrieving: a "
                                                        "TREC run (e.g. another run's runs/first_stage.trec), "
                                                        "rank_llm's JSON/JSONL or FlashRAG's retrieval cache; its "
                                                        "ids are looked up in --index.")
    sweep: str | None = option("--sweep", help="SETTING=V1,V2,…: one run folder per value in OUT/SETTING=VALUE, "
                                               "the LLM calls the values share made once (e.g. "
                                               "judge_n=-0.5,0,0.5,1 or n=20,40,60,80,100).")

    def __post_init__(self) -> None:
        """Refuse options that cannot go together, or values out of range, naming the options."""
        self._check_ranges()
        if self.engine is not None and self.engine not in ENGINES:
            raise WinnowError(f"--engine {self.engine!r} is not one of {', '.join(ENGINES)}")
        given = [name for name, value in (("--ray-address", self.ray_address), ("--ray-workers", self.ray_workers),
                                          ("--ray-cpus-per-worker", self.ray_cpus is not None)) if value]
        if self.engine != "ray" and given:
            raise WinnowError(f"{', '.join(given)} only apply with --engine ray")
        if self.first_stage_run is not None and (self.sweep is not None or self.engine == "ray"):
            raise WinnowError("--run is read with --engine local and without --sweep", "run each setting on its own")
        if self.processes is not None and self.processes > 1:
            clash = [name for name, given_too in (("--engine ray", self.engine == "ray"),
                                                  ("--sweep", self.sweep is not None),
                                                  ("--run", self.first_stage_run is not None)) if given_too]
            if clash:
                raise WinnowError(f"--processes {self.processes} runs with --engine local, not with "
                                  f"{', '.join(clash)}", "leave --processes out")
        if self.sweep is not None and self.engine == "ray":
            raise WinnowError("--sweep runs with --engine local", "run each value as its own --engine ray run")

    def _check_ranges(self) -> None:
        for flag, value in (("--limit", self.limit), ("--batch-size", self.batch_size),
                            ("--processes", self.processes), ("--ray-workers", self.ray_workers)):
            if value is not None and value < 1:
                raise WinnowError(f"{flag} must be at least 1 (got {value})")
        if self.relevance_level is not None and self.relevance_level < 1:
            raise WinnowError(f"--relevance-level must be at least 1 (got {self.relevance_level})",
                              "TREC DL counts grade 2 and up as relevant (--relevance-level 2); binary qrels use 1")
        if self.ray_cpus is not None and not self.ray_cpus > 0:
            raise WinnowError(f"--ray-cpus-per-worker must be above 0 (got {self.ray_cpus:g})")

    @property
    def cpus_per_worker(self) -> float:
        """``--ray-cpus-per-worker``, 1 when not given."""
        return 1 if self.ray_cpus is None else self.ray_cpus

    def resolve(self, options: RunOptions) -> ResolvedEval:
        """The run these options and ``options`` ask for, every check done before anything loads:
        the Ray cluster reachable, the price table read, the run's spec resolved
        (:func:`~winnow.run_spec.resolve_run`) and checked against ``--processes``, ``--run`` and
        ``--sweep``; a ``--run`` file is part of the run's identity (its checksum in the spec)."""
        from ..run_spec import resolve_run

        if self.engine == "ray":
            from ..extras import require
            from ..ray_cluster import check_reachable

            require("ray", "winnow eval --engine ray")
            if self.ray_address:
                check_reachable(self.ray_address)
        prices = None
        if self.prices is not None:
            from .prices import read_prices

            prices = read_prices(self.prices)
        spec = self._checked(resolve_run(options))
        if self.sweep is not None:
            self._check_sweep_given_once(options)
        return ResolvedEval(self, spec, prices, api_key=options.api_key or "", cache=options.cache)

    def _checked(self, spec: RunSpec) -> RunSpec:
        if self.processes is not None:
            from .process_engine import check_processes

            check_processes(self.processes, spec)
        if self.first_stage_run is None:
            return spec
        if spec.ann:
            raise WinnowError(f"--run and --ann {spec.ann}: a precomputed first stage is read, not searched",
                              "leave --ann out with --run")
        from ..index.manifest import file_sha256

        if not self.first_stage_run.is_file():
            raise WinnowError(f"--run {self.first_stage_run}: no such file",
                              "give a TREC run, rank_llm or FlashRAG file")
        # Part of the run's identity: resuming with another first stage is refused.
        return dataclasses.replace(spec, first_stage_run=f"{self.first_stage_run.resolve()} "
                                                         f"sha256:{file_sha256(self.first_stage_run)}")

    def _check_sweep_given_once(self, options: RunOptions) -> None:
        from ..config import parse_assignment
        from ..settings import SettingError
        from .sweep import parse_sweep

        setting, _ = parse_sweep(self.sweep or "")
        given = set(options.setting_values()) | {parse_assignment(a)[0] for a in options.assignments or ()}
        if setting in given:
            raise SettingError(setting, f"setting {setting!r} is given both by --sweep and by its own flag or --set",
                               "give its values once, in --sweep")

    def processes_for(self, spec: RunSpec, pending: int) -> int:
        """Client processes for ``pending`` questions: ``--processes``, else one with ``--run``, else
        the default for the run's servers (:func:`~winnow.evaluation.process_engine.default_processes`)."""
        from .process_engine import default_processes

        if self.processes is not None:
            return self.processes
        return 1 if self.first_stage_run is not None else default_processes(spec, pending)


@dataclass(frozen=True)
class ResolvedEval:
    """``winnow eval``'s options resolved: the run's spec, the price table, the key and the cache."""

    options: EvalOptions
    spec: RunSpec
    prices: PriceTable | None
    api_key: str = ""
    cache: bool = True

    def run_arguments(self) -> dict[str, Any]:
        """The keyword arguments of an :class:`~winnow.evaluation.runner.EvalRun` (and of each run of a sweep)."""
        chosen = self.options
        return {"limit": chosen.limit, "seed": chosen.seed, "qrels": chosen.qrels, "capped": bool(chosen.capped),
                "relevance_level": chosen.relevance_level, "api_key": self.api_key, "cache": self.cache,
                "prices": self.prices}
