"""What every ``winnow`` command shares: the typer app, the consoles, option types, run resolution
and progress bars. Command modules import from here; ``winnow.cli`` imports the command modules.

Errors a user can fix print as one line and exit with status 2; ``--debug`` shows the traceback.
Results go to stdout (``--json`` prints one JSON object); progress, usage and notes go to stderr.
"""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

from ..config import parse_assignment
from ..errors import WinnowError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Winnow: retrieve, let an LLM rerank and filter, answer from what survives.")
out = Console()
err = Console(stderr=True)
STATE = {"debug": False}

IndexOption = Annotated[Path, typer.Option("--index", "-i", help="Index folder made by `winnow index`.")]
JsonOption = Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")]


@app.callback()
def _global(debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks on errors.")] = False) -> None:
    STATE["debug"] = debug


class StageProgress:
    """A progress bar per LLM stage, fed by the LLM client's progress hook."""

    def __init__(self, console: Console) -> None:
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            console=console, transient=True)
        self.tasks: dict[str, TaskID] = {}
        self.on_call: Any = None  # told of every finished call (the run's bar refreshes its rates)

    def __call__(self, stage: str, done: int, total: int) -> None:
        if self.on_call:
            self.on_call()
        if stage not in self.tasks:
            self.tasks[stage] = self.bar.add_task(f"LLM {stage}", total=total)
        self.bar.update(self.tasks[stage], completed=done, total=total)
        if done >= total:
            self.bar.remove_task(self.tasks.pop(stage))


ModelOption = Annotated[Optional[str], typer.Option("--model", help="Registry name, .gguf path, or the server's "
                                                                    "model name with --backend openai "
                                                                    "\\[default: qwen2.5-coder-1.5b].")]
BackendOption = Annotated[Optional[str], typer.Option("--backend", help="llama.cpp (in-process, default), openai "
                                                                        "(any OpenAI-compatible server) or "
                                                                        "transformers (a fine-tuned model folder; "
                                                                        "needs the \\[train] extra).")]
BaseUrlOption = Annotated[Optional[list[str]], typer.Option("--base-url", help="Server URL for --backend openai "
                                                                               "(or WINNOW_OPENAI_BASE_URL); "
                                                                               "repeat it for several endpoints, "
                                                                               "each call going to the least "
                                                                               "loaded.")]
MaxInflightOption = Annotated[Optional[int], typer.Option("--max-inflight", min=1,
                                                          help="--backend openai: LLM calls in flight at once over "
                                                               "all endpoints (default 64; set it to the servers' "
                                                               "capacity of concurrent sequences).")]
CallTimeoutOption = Annotated[Optional[float], typer.Option("--timeout", min=0.001,
                                                           help="--backend openai: seconds one LLM call may take "
                                                                "before it is abandoned and retried, on another "
                                                                "endpoint when there is one (default 600).")]
SlotsOption = Annotated[Optional[int], typer.Option("--slots", min=1,
                                                  help="--backend llama.cpp: sequences decoded together, each "
                                                       "with --context-size tokens (default 1). Scores then "
                                                       "differ slightly from one slot's and from run to run; "
                                                       "the speed-up on a CPU is small (docs/benchmarks.md).")]
ApiKeyOption = Annotated[str, typer.Option("--api-key", help="Key for --backend openai (or WINNOW_OPENAI_API_KEY).",
                                           show_default=False)]
NoCacheOption = Annotated[bool, typer.Option("--no-cache", help="Bypass the LLM call cache.")]
MethodOption = Annotated[Optional[str], typer.Option("--method", "-m", help="vanilla, rankrag, mainrag, rrr or "
                                                                          "rankgpt (see `winnow methods`) "
                                                                          "\\[default: rankrag].")]
RetrieverOption = Annotated[Optional[str], typer.Option("--retriever", help="bm25 (default), dense or hybrid "
                                                                          "(dense needs `winnow index --dense`).")]
NOption = Annotated[Optional[int], typer.Option("--n", help="Passages to retrieve (default 20).")]
KOption = Annotated[Optional[int], typer.Option("--k", help="Passages to answer from (default 5).")]
JudgeModelOption = Annotated[Optional[str], typer.Option("--judge-model", help="mainrag: the judge agent's model "
                                                                          "(the same as --agent judge=MODEL).")]
FinalModelOption = Annotated[Optional[str], typer.Option("--final-model", help="mainrag: the final predictor's model "
                                                                          "(the same as --agent final=MODEL).")]
AgentOption = Annotated[Optional[list[str]], typer.Option("--agent", help="Give an agent role its own model, "
                                                                        "ROLE=MODEL (repeatable): mainrag judge, "
                                                                        "final; rrr rewrite, relevance, rerank.")]
SetOption = Annotated[Optional[list[str]], typer.Option("--set", help="Any method setting, KEY=VALUE (repeatable), "
                                                                      "e.g. --set window=20.")]
ConfigOption = Annotated[Optional[Path], typer.Option("--config", help="TOML or YAML file of settings; flags win.")]
PricesOption = Annotated[Optional[Path], typer.Option("--prices", help="TOML or JSON price table, USD per million "
                                                                     "prompt and completion tokens per model: "
                                                                     "adds the cost in USD (docs/reproducing.md).")]
ProfileOption = Annotated[Optional[str], typer.Option("--profile", help="Start from a named preset of settings: "
                                                                      "paper (the papers' values; see `winnow "
                                                                      "methods`), paper-70b, paper-fever, "
                                                                      "paper-convqa, ...; a config file and "
                                                                      "flags override it.")]
FusionAlphaOption = Annotated[Optional[float], typer.Option("--fusion-alpha", help="Blend reranker and first-stage "
                                                                                   "scores (0 = the paper).")]
ContextSizeOption = Annotated[Optional[int], typer.Option("--context-size", help="Tokens of prompt and answer the "
                                                                              "model's context holds (llama.cpp "
                                                                              "default 4096); longer passages are "
                                                                              "cut to fit, and the trace says so.")]
MaxAnswerTokensOption = Annotated[Optional[int], typer.Option("--max-answer-tokens",
                                                              help="Longest answer the reader may write.")]
FramingOption = Annotated[Optional[str], typer.Option("--framing", help="chat (the model's chat template, default) "
                                                                        "or plain (RankRAG App. D's 'System: … "
                                                                        "User: … Assistant:' text as a raw "
                                                                        "completion); rankrag and vanilla.")]
TaskOption = Annotated[Optional[str], typer.Option("--task", help="qa (default), fever (claims: App. D's FEVER "
                                                                  "prompts) or conversational (questions with "
                                                                  "dialogue history); rankrag and vanilla.")]
TurnOption = Annotated[Optional[list[str]], typer.Option("--turn", help="An earlier turn of the dialogue, user:TEXT "
                                                                        "or assistant:TEXT (repeatable, oldest "
                                                                        "first); needs --task conversational.")]
HistoryOption = Annotated[Optional[Path], typer.Option("--history", help="JSON file: the dialogue's earlier turns, "
                                                                         "a list of {\"role\", \"text\"}.")]

# What one request to a server (`winnow serve`, `winnow mcp`) may ask: the limits of winnow.service.limits.
ThreadsOption = Annotated[Optional[int], typer.Option("--threads", min=1, help="llama.cpp CPU threads "
                                                                               "(default: all cores).")]
MaxPendingOption = Annotated[int, typer.Option("--max-pending", min=1, help="Requests that may wait for or use "
                                                                            "the model at once; more are refused.")]
TimeoutOption = Annotated[float, typer.Option("--timeout", min=0.001, help="Seconds a request may wait for and "
                                                                           "use the model.")]
MaxQuestionCharsOption = Annotated[int, typer.Option("--max-question-chars", min=1)]
MaxDocumentsOption = Annotated[int, typer.Option("--max-documents", min=1, help="Per rerank request.")]
MaxDocumentCharsOption = Annotated[int, typer.Option("--max-document-chars", min=1)]
MaxNOption = Annotated[int, typer.Option("--max-n", min=1, help="Largest N (and search k) a request may ask.")]
MaxKOption = Annotated[int, typer.Option("--max-k", min=1)]


def resolve_run(config: Path | None, assignments: list[str] | None, *, agents: list[str] | None = None,
                agents_for_method: bool = True, **flags: Any):
    """The RunSpec of a command's options: the config file, then ``--set`` values and named flags
    (run options such as ``model=`` and method settings such as ``n=`` alike; ``None`` = not given).

    A value given both by ``--set`` and by its own flag must agree; two different values are
    refused rather than one silently winning.
    """
    from ..config import RUN_OPTIONS
    from ..pipeline import RunSpec

    assigned = dict(parse_assignment(a) for a in assignments or [])
    named = {key: value for key, value in flags.items() if value is not None}
    for key in sorted(assigned.keys() & named.keys()):
        if assigned[key] != named[key]:
            raise WinnowError(f"--set {key}={assigned[key]!r} and --{key.replace('_', '-')} {named[key]!r} disagree",
                              "give the value once")
    values = {**assigned, **named}
    if isinstance(values.get("base_url"), list):  # --base-url repeated: the endpoints, comma-separated
        values["base_url"] = ",".join(values["base_url"])
    if agents:
        values["agents"] = {**(values.get("agents") or {}), **dict(parse_role(a) for a in agents)}
    run = {key: value for key, value in values.items() if key in RUN_OPTIONS}
    settings = {key: value for key, value in values.items() if key not in RUN_OPTIONS}
    return RunSpec.resolve(config=config, settings=settings, run=run, agents_for_method=agents_for_method)


def dialogue_from(turns: list[str] | None, history_file: Path | None):
    """The earlier turns of ``--turn ROLE:TEXT`` (repeated) or ``--history FILE``, checked."""
    import json

    from ..errors import InputError
    from ..records import dialogue_history

    if turns and history_file:
        raise WinnowError("--turn and --history both give the dialogue's history", "give it one way")
    if history_file:
        try:
            value = json.loads(history_file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise InputError(history_file, f"cannot read the history: {exc}",
                             hint='a JSON list of {"role", "text"}') from exc
        try:
            return dialogue_history(value)
        except ValueError as exc:
            raise InputError(history_file, str(exc), field="history") from exc
    listed = []
    for turn in turns or []:
        role, sep, text = turn.partition(":")
        if not sep:
            raise WinnowError(f"--turn {turn!r} is not ROLE:TEXT", "e.g. --turn 'user:who wrote hamlet'")
        listed.append({"role": role.strip(), "text": text.strip()})
    try:
        return dialogue_history(listed)
    except ValueError as exc:
        raise WinnowError(f"--turn: {exc}", "give the turns oldest first: user, assistant, user, …") from exc


def parse_role(text: str) -> tuple[str, str]:
    """``--agent judge=qwen2.5-coder-1.5b`` as (role, model)."""
    role, sep, model = text.partition("=")
    if not sep or not role.strip() or not model.strip():
        raise WinnowError(f"--agent {text!r} is not ROLE=MODEL", "e.g. --agent judge=qwen2.5-coder-1.5b")
    return role.strip(), model.strip()


@contextmanager
def spinner_while_loading(backend: str):
    """A spinner naming the model being loaded; yields the callback a Pipeline calls per model."""
    with err.status("loading") as status:
        yield lambda name: status.update(f"loading {name} ({backend})")
