"""What every ``winnow`` command shares: the typer app, the consoles, option types, run resolution
and progress bars. Command modules import from here; ``winnow.cli`` imports the command modules.

Errors a user can fix print as one line and exit with status 2; ``--debug`` shows the traceback.
Results go to stdout (``--json`` prints one JSON object); progress, usage and notes go to stderr.
"""

from __future__ import annotations

import functools
import inspect
import signal
import threading
import time
import typing
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import fields
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional, TypeVar

import typer
import typer.core
from rich.console import Console

from ..errors import WinnowError
from ..interruption import defer
from ..startup import resume_collection

if TYPE_CHECKING:
    from rich.progress import TaskID

    from ..pipeline import Pipeline
    from ..records import Turn
    from ..run_spec import RunOptions, RunSpec
    from ..stages.retrieve import SearchIndex

C = TypeVar("C", bound=Callable[..., Any])

#: Options whose help is completed from the registries when help is shown: typer parameter -> its help then.
GENERATED_HELP: dict[str, Callable[[], str]] = {}


class WinnowGroup(typer.core.TyperGroup):
    """The ``winnow`` group: a command's help asked for (``winnow ask --help``) gets the help its run
    options generate from the registries (:data:`GENERATED_HELP`: the methods, their roles), filled in
    only then, so a command that is run does not import the methods to describe them."""

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        name, command, rest = super().resolve_command(ctx, args)
        # The command's own options are read with the collector running again (winnow.startup):
        # from here on, what a command makes may be garbage.
        resume_collection()
        if command is not None and any(arg in ("--help", "-h") for arg in rest):
            for parameter in command.params:
                if not isinstance(parameter, typer.core.TyperOption):
                    continue
                if parameter.name in GENERATED_HELP:
                    parameter.help = GENERATED_HELP[parameter.name]().replace("[", "\\[")
                # A lower bound is checked when the command runs; shown, "[x>=0.001]" took a column of its own.
                parameter.min = None
        return name, command, rest


app = typer.Typer(cls=WinnowGroup, add_completion=True, no_args_is_help=True, pretty_exceptions_enable=False,
                  context_settings={"help_option_names": ["-h", "--help"]},
                  help="Winnow: retrieve, let an LLM rerank and filter, answer from what survives.")


class Output(Console):
    """Standard output: rich when a person reads it, plain for a pipe or a file.

    ``--json`` for a program is written as ``json.dumps`` writes it, byte for byte what rich prints
    there without colour, but without rich's highlighting pass over every token (0.12 s for the
    metrics of a 1,000-question RankGPT run, time the command spent after its last answer)."""

    def print_json(self, json: str | None = None, *, data: Any = None, indent: None | int | str = 2,
                   highlight: bool = True, skip_keys: bool = False, ensure_ascii: bool = False,
                   check_circular: bool = True, allow_nan: bool = True, default: Callable[[Any], Any] | None = None,
                   sort_keys: bool = False) -> None:
        if self.is_terminal:
            super().print_json(json, data=data, indent=indent, highlight=highlight, skip_keys=skip_keys,
                               ensure_ascii=ensure_ascii, check_circular=check_circular, allow_nan=allow_nan,
                               default=default, sort_keys=sort_keys)
            return
        import json as json_module

        value = json_module.loads(json) if json is not None else data
        self.file.write(json_module.dumps(value, indent=indent, skipkeys=skip_keys, ensure_ascii=ensure_ascii,
                                          check_circular=check_circular, allow_nan=allow_nan, default=default,
                                          sort_keys=sort_keys) + "\n")


out = Output()
err = Console(stderr=True)
STATE = {"debug": False}

IndexOption = Annotated[Path, typer.Option("--index", "-i", metavar="DIR", help="Made by `winnow index`.")]
JsonOption = Annotated[bool, typer.Option("--json", metavar="", help="Print one JSON object, not tables.")]


def _print_version(asked: bool) -> None:
    if asked:
        from ..version import __version__

        out.print(f"winnow {__version__}", highlight=False)
        raise typer.Exit()


@app.callback()
def _global(debug: Annotated[bool, typer.Option("--debug", metavar="", help="Show tracebacks on errors.")] = False,
            version: Annotated[bool, typer.Option("--version", metavar="", is_eager=True, callback=_print_version,
                                                  help="Print Winnow's version and exit.")] = False) -> None:
    STATE["debug"] = debug


class Stopped(KeyboardInterrupt):
    """A stop asked by a signal (SIGINT: Ctrl-C or ``kill -INT``; SIGTERM: ``kill``): a
    KeyboardInterrupt that remembers which, so the command exits 128 + its number (:func:`exit_for`)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def exit_for(stop: KeyboardInterrupt) -> typer.Exit:
    """The exit of a command stopped by a signal: 128 + its number (130 for Ctrl-C, 143 for SIGTERM),
    as a shell reports a process the signal ended. (Typer would make any KeyboardInterrupt 130.)"""
    return typer.Exit(128 + getattr(stop, "signum", signal.SIGINT))


#: The signals that stop a command, and what a second one does while it stops (Ctrl-C interrupts the
#: wait; SIGTERM ends the process at once).
STOP_SIGNALS: dict[int, Any] = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}


@contextmanager
def stop_on_signal(inflight: Callable[[], int | None], saved: str = "") -> Iterator[None]:
    """SIGINT (Ctrl-C, ``kill -INT``) or SIGTERM (``kill``) during the block says at once that Winnow
    is stopping and how many LLM calls it waits for (``inflight()``: the dispatchers' count, None
    where it cannot be known), then raises :class:`Stopped` (a KeyboardInterrupt; the command exits
    128 + the signal's number, :func:`exit_for`). Without this the line came only after the calls in flight had
    been cancelled and the pipeline closed, so a user saw nothing happen. A second Ctrl-C
    interrupts the wait itself, a second SIGTERM ends the process. ``saved`` says where the work
    done so far is kept.

    The handlers are set whatever the process started with: a command started in the background
    by a script (``nohup winnow eval … &``) starts with SIGINT ignored, and ``kill -INT`` must
    still stop it, as it stops one started at a terminal."""
    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers belong to the main thread
        return

    def stopping(signum: int, frame: object) -> None:
        for number, second in STOP_SIGNALS.items():
            signal.signal(number, second)
        count = inflight()
        waiting = "the calls in flight" if count is None else f"{count} call{'' if count == 1 else 's'} in flight"
        err.print(f"stopping: waiting for {waiting} to be cancelled" + (f"; {saved}" if saved else ""),
                  highlight=False, soft_wrap=True)
        if not defer(Stopped(signum)):  # inside a database write: raised when it ends
            raise Stopped(signum)

    previous = {number: signal.signal(number, stopping) for number in STOP_SIGNALS}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


class StageProgress:
    """A progress bar per LLM stage, fed by the LLM client's progress hook.

    Many threads may report the same stage at once (`winnow eval` against a server asks many
    questions at a time, each its own stage calls): a stage's bar sums the calls of every caller
    still in it, and is redrawn at most ten times a second (a redraw per call cost more CPU than
    the call).
    """

    REDRAW_SECONDS = 0.1

    def __init__(self, console: Console) -> None:
        # rich.progress on first use: `winnow --help` does not import it
        from rich.progress import BarColumn, MofNCompleteColumn, TextColumn, TimeElapsedColumn

        from ..progress import progress_bar

        self.bar = progress_bar(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                TimeElapsedColumn(), console=console, transient=True)
        self.tasks: dict[str, TaskID] = {}
        self.on_call: Any = None  # told of every finished call (the run's bar refreshes its rates)
        self._lock = threading.Lock()
        self._callers: dict[str, dict[int, tuple[int, int]]] = {}  # stage -> thread -> (done, total)
        self._drawn: dict[str, float] = {}  # stage -> when its bar was last redrawn

    def __call__(self, stage: str, done: int, total: int) -> None:
        if self.on_call:
            self.on_call()
        with self._lock:
            callers = self._callers.setdefault(stage, {})
            if done >= total:
                callers.pop(threading.get_ident(), None)
            else:
                callers[threading.get_ident()] = (done, total)
            if not callers:
                self._callers.pop(stage)
                self._drawn.pop(stage, None)
                if stage in self.tasks:
                    self.bar.remove_task(self.tasks.pop(stage))
                return
            now = time.monotonic()
            if stage in self.tasks and now - self._drawn.get(stage, 0.0) < self.REDRAW_SECONDS:
                return
            self._drawn[stage] = now
            completed = sum(d for d, _ in callers.values())
            calls = sum(t for _, t in callers.values())
            if stage not in self.tasks:
                self.tasks[stage] = self.bar.add_task(f"LLM {stage}", total=calls)
            self.bar.update(self.tasks[stage], completed=completed, total=calls)


# What one request to a server (`winnow serve`, `winnow mcp`) may ask: the limits of winnow.service.limits.
MaxPendingOption = Annotated[int, typer.Option("--max-pending", min=1, help="Requests that may wait for or use "
                                                                            "the model at once; more are refused.")]
TimeoutOption = Annotated[float, typer.Option("--timeout", min=0.001, help="Seconds a request may wait for and "
                                                                           "use the model.")]
MaxQuestionCharsOption = Annotated[int, typer.Option("--max-question-chars", min=1)]
MaxDocumentsOption = Annotated[int, typer.Option("--max-documents", min=1, help="Per rerank request.")]
# Defaults: cross-encoder/ms-marco-MiniLM-L-6-v2 and castorini/monot5-base-msmarco, loaded on first use;
# e.g. cross-encoder=BAAI/bge-reranker-v2-m3 for every method that reranks with one (rerank=cross-encoder).
RerankModelOption = Annotated[Optional[list[str]], typer.Option(
    "--rerank-model", metavar="METHOD=MODEL", show_default=False,
    help="The cross-encoder or monot5 model (a folder or hub id; repeatable).")]


def rerank_models(values: list[str] | None) -> dict[str, str]:
    """``--rerank-model METHOD=MODEL`` values as {method: model}, a bad one refused naming the option."""
    from ..errors import WinnowError
    from ..rerank import MODEL_RERANK_METHODS

    chosen: dict[str, str] = {}
    for value in values or ():
        method, _, model = value.partition("=")
        if method not in MODEL_RERANK_METHODS or not model.strip():
            raise WinnowError(f"--rerank-model {value!r}: expected METHOD=MODEL with METHOD one of "
                              f"{', '.join(MODEL_RERANK_METHODS)}", "e.g. --rerank-model cross-encoder=./my-reranker")
        chosen[method] = model.strip()
    return chosen
MaxDocumentCharsOption = Annotated[int, typer.Option("--max-document-chars", min=1)]
MaxNOption = Annotated[int, typer.Option("--max-n", min=1, help="Largest N (and search k) a request may ask.")]
MaxKOption = Annotated[int, typer.Option("--max-k", min=1)]
PricesOption = Annotated[Optional[Path], typer.Option("--prices", help="TOML or JSON price table, USD per million "
                                                                     "prompt and completion tokens per model: "
                                                                     "adds the cost in USD (docs/reproducing.md).")]
TurnOption = Annotated[Optional[list[str]], typer.Option("--turn", metavar="ROLE:TEXT", help="An earlier turn, "
                                                                                            "oldest first.")]
HistoryOption = Annotated[Optional[Path], typer.Option("--history", metavar="FILE", help="JSON [{role, text}]: "
                                                                                         "earlier turns.")]


def _option_type(kind: Any) -> Any:
    """The type typer parses a RunOptions field as (repeatable options as lists)."""
    inner = next((arg for arg in typing.get_args(kind) if arg is not type(None)), kind)
    if typing.get_origin(inner) is tuple:
        return Optional[list[str]]
    return bool if inner is bool else Optional[inner]


def with_run_options(*, only: Collection[str] | None = None, taken: Collection[str] = ()) -> Callable[[C], C]:
    """Give a command every run option of :class:`~winnow.run_spec.RunOptions` (or those named in
    ``only``), declared there once: the command takes ``options: RunOptions`` and typer sees one option
    per field. ``taken`` names flags the command uses for something else (``winnow serve``'s own
    ``--api-key``), left off the run option that also has them."""
    from ..run_spec import RunOptions

    return with_options(RunOptions, "options", "run", only=only, taken=taken)


def with_options(declared: type[Any], parameter: str, prefix: str, *, only: Collection[str] | None = None,
                 taken: Collection[str] = (), panel: str | None = None) -> Callable[[C], C]:
    """Give a command the options of the frozen dataclass ``declared``, whose fields carry their flags
    and help (:func:`winnow.run_spec.option`): the command takes ``parameter: declared`` and typer sees
    one option per field, named ``PREFIX_FIELD`` (under the help panel ``panel``); see
    :func:`with_run_options`."""
    hints = typing.get_type_hints(declared)
    chosen = [f for f in fields(declared) if only is None or f.name in only]
    prefix = f"{prefix}_"

    def decorate(command: C) -> C:
        own = inspect.signature(command, eval_str=True)
        parameters = [p for p in own.parameters.values() if p.name != parameter]
        for f in chosen:
            meta = f.metadata
            flags = [flag for flag in meta["flags"] if flag not in taken]
            kind = _option_type(hints[f.name])
            generated, choices = meta["generated"], meta.get("choices")
            if choices is not None and meta.get("listed", True):  # "vanilla|rankrag|… [default: rankrag]"
                GENERATED_HELP[f"{prefix}{f.name}"] = functools.partial(help_with_choices, meta["help"], choices)
            elif generated is not None:
                GENERATED_HELP[f"{prefix}{f.name}"] = functools.partial(help_with_generated, meta["help"], generated)
            option = typer.Option(*flags, help=meta["help"].replace("[", "\\["), min=meta["minimum"],
                                  metavar=meta["metavar"] or default_metavar(kind), show_default=False,
                                  rich_help_panel=meta.get("panel") or panel,
                                  autocompletion=None if choices is None else completion(choices))
            parameters.append(inspect.Parameter(f"{prefix}{f.name}", inspect.Parameter.KEYWORD_ONLY,
                                                default=False if kind is bool else None,
                                                annotation=Annotated[kind, option]))

        @functools.wraps(command)
        def with_options(**given: Any) -> Any:
            values = {f.name: given.pop(f"{prefix}{f.name}") for f in chosen}
            # An option not given is None, a switch not given False, a repeated one not given empty.
            # Compared by identity: 0 == False, and `--k 0` is a value given, to honour or refuse.
            values = {name: (tuple(value) if isinstance(value, list) else value) for name, value in values.items()
                      if not (value is None or value is False or (isinstance(value, (list, tuple)) and not value))}
            return command(**{parameter: declared(**values)}, **given)

        del with_options.__wrapped__  # typer reads the signature below, not the command's own
        with_options.__signature__ = own.replace(parameters=parameters)  # type: ignore[attr-defined]
        with_options.__annotations__ = {}
        return typing.cast(C, with_options)

    return decorate


def default_metavar(kind: Any) -> str | None:
    """The placeholder of an option's value in help: TEXT, N, X, PATH; none for a flag."""
    inner = next((arg for arg in typing.get_args(kind) if arg is not type(None)), kind)
    return {str: "TEXT", int: "N", float: "X", Path: "PATH", bool: ""}.get(inner)


def help_with_choices(text: str, choices: Callable[[], Sequence[str]]) -> str:
    """An option's help led by its values, ``a, b, c``, read from their registry when help is shown."""
    return f"{', '.join(choices())} {text}".strip()  # ", ": a long list wraps where "a|b|c" was cut


def help_with_generated(text: str, generated: Callable[[], str]) -> str:
    return f"{text} {generated()}".strip()


def completion(choices: Callable[[], Sequence[str]]) -> Callable[[str], list[str]]:
    """Shell completion of an option's values, from their registry (``winnow --install-completion``)."""

    def complete(incomplete: str) -> list[str]:
        return [choice for choice in choices() if choice.startswith(incomplete)]

    return complete


def open_pipeline(spec: RunSpec, index_dir: Path, options: RunOptions, *,
                  progress: Callable[[str, int, int], None] | None = None,
                  retriever: SearchIndex | None = None, store: str = "") -> Pipeline:
    """The pipeline of ``spec`` over ``index_dir``, loaded under a spinner naming each model, with
    the run's key (or WINNOW_OPENAI_API_KEY), call cache and threads; ``retriever`` replaces the
    index's own first stage (a precomputed run); ``store`` (`serve --store`) is a shared store's URL
    that holds the call cache instead of the local file (unless --no-cache)."""
    import os

    from ..pipeline import Pipeline

    api_key = options.api_key or os.environ.get("WINNOW_OPENAI_API_KEY", "")
    with spinner_while_loading(spec.backend) as loading, quiet_notices():
        cache: bool | str = store if store and options.cache else options.cache
        pipeline = Pipeline(spec, index_dir, api_key=api_key, cache=cache, progress=progress,
                            loading=loading, threads=options.threads, retriever=retriever)
    print_notices(pipeline.method.notices)
    return pipeline


@contextmanager
def quiet_notices() -> Iterator[None]:
    """Hold back the :class:`WinnowWarning` a method raises for Python callers while it is built: a
    command prints the method's notices itself, once, as a line of its own (:func:`print_notices`)."""
    import warnings

    from ..errors import WinnowWarning

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", WinnowWarning)
        yield


def print_notices(notices: Sequence[str]) -> None:
    """What the user should know about how the method was built, before it runs (once per run)."""
    for notice in notices:
        err.print(f"[yellow]note:[/] {notice}", highlight=False)


def dialogue_from(turns: list[str] | None, history_file: Path | None) -> tuple[Turn, ...]:
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


@contextmanager
def spinner_while_loading(backend: str) -> Iterator[Callable[[str], None]]:
    """A spinner naming the model being loaded; yields the callback a Pipeline calls per model."""
    with err.status("loading") as status:
        yield lambda name: status.update(f"loading {name} ({backend})")
