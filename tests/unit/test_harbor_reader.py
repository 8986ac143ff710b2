"""Harbor task directories: what is read (instruction, timeouts, starting files from environment/),
what is refused in one line, and the rows the built-in tasks make."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from turnrl.agent.harbor.spec import DEFAULT_AGENT_TIMEOUT_S, DEFAULT_VERIFIER_TIMEOUT_S
from turnrl.tasks import TASKS
from turnrl.tasks.harbor import (
    HELD_OUT_TASKS,
    TRAIN_FAMILIES,
    VAL_FAMILIES,
    HarborTaskError,
    Limits,
    builtin_tasks,
    read_task,
    read_tasks,
    rows,
    task_from_row,
)

TOML = """version = "1.0"

[verifier]
timeout_sec = 45.0

[agent]
timeout_sec = 900.0

[environment]
cpus = 1
memory_mb = 2048
"""


def make_task(
    root: Path, name: str = "t", toml: str | None = TOML, dockerfile: str | None = None, **files: str
) -> Path:
    """A task directory; `files` maps paths relative to it (`environment/app/x.py`) to text."""
    d = root / name
    base = {"instruction.md": "Do it.\n", "tests/test.sh": "exit 0\n", **files}
    if toml is not None:
        base["task.toml"] = toml
    if dockerfile is not None:
        base["environment/Dockerfile"] = dockerfile
    for rel, text in base.items():
        (d / rel).parent.mkdir(parents=True, exist_ok=True)
        (d / rel).write_text(text)
    return d


def paths(task) -> dict[str, str]:
    return {f.path: f.content.decode() for f in task.files}


def test_a_task_reads_its_instruction_timeouts_tests_and_solution(tmp_path):
    d = make_task(tmp_path, **{"solution/solve.sh": "echo hi\n", "tests/test_x.py": "pass\n"})
    task = read_task(d)
    assert task.name == "t" and task.instruction == "Do it.\n"
    assert (task.agent_timeout_s, task.verifier_timeout_s) == (900.0, 45.0)
    assert [f.path for f in task.tests] == ["/tests/test.sh", "/tests/test_x.py"]
    assert task.solve_sh() == "echo hi\n" and task.files == ()
    # a newer task.toml names the task; no task.toml at all: Harbor's defaults
    named = read_task(make_task(tmp_path, "n", toml='schema_version = "1.1"\n[task]\nname = "org/fix-it"\n'))
    assert named.name == "org/fix-it"
    bare = read_task(make_task(tmp_path, "b", toml=None))
    assert (bare.agent_timeout_s, bare.verifier_timeout_s) == (
        DEFAULT_AGENT_TIMEOUT_S,
        DEFAULT_VERIFIER_TIMEOUT_S,
    )


def test_without_a_dockerfile_environment_is_the_workspace(tmp_path):
    d = make_task(tmp_path, **{"environment/main.py": "x = 1\n", "environment/pkg/util.py": "y = 2\n"})
    assert paths(read_task(d)) == {"/app/main.py": "x = 1\n", "/app/pkg/util.py": "y = 2\n"}


def test_workdir_and_copy_are_interpreted_as_docker_does(tmp_path):
    dockerfile = (
        "# syntax=docker/dockerfile:1\n"
        "FROM python:3.12-slim AS base\n"
        "WORKDIR /app\n"
        "COPY src/ ./\n"  # a folder's contents
        "COPY --chown=1000 notes.txt docs/\n"  # a file into a folder
        'COPY ["conf.ini", "settings.ini"]\n'  # JSON form, a file renamed
        "COPY *.cfg \\\n    cfg/\n"  # a glob, continued line
    )
    d = make_task(
        tmp_path,
        dockerfile=dockerfile,
        **{
            "environment/src/main.py": "m\n",
            "environment/src/lib/a.py": "a\n",
            "environment/notes.txt": "n\n",
            "environment/conf.ini": "c\n",
            "environment/x.cfg": "x\n",
            "environment/sub/y.cfg": "not matched by *.cfg\n",
        },
    )
    assert paths(read_task(d)) == {
        "/app/main.py": "m\n",
        "/app/lib/a.py": "a\n",
        "/app/docs/notes.txt": "n\n",
        "/app/settings.ini": "c\n",
        "/app/cfg/x.cfg": "x\n",
    }


REFUSALS = [
    ({"dockerfile": "FROM python:3.12\nRUN pip install numpy\n"}, "environment/Dockerfile line 2: RUN pip install numpy needs a built image; only FROM, WORKDIR and COPY are read"),
    ({"dockerfile": "FROM python:3.12\nENV A=1\n"}, "line 2: ENV A=1 needs a built image"),
    ({"dockerfile": "FROM nvidia/cuda:12.4\nWORKDIR /app\n"}, "line 1: FROM nvidia/cuda:12.4 needs that image; plain bases: python, debian, ubuntu, buildpack-deps"),
    ({"dockerfile": "FROM python:3.12\nWORKDIR /workspace\n"}, "environment/Dockerfile: WORKDIR /workspace: the sandbox's workspace is /app"),
    ({"dockerfile": "FROM python:3.12\nWORKDIR /app\nCOPY --from=build /x /app/\n"}, "line 3: COPY --from=build needs another image or build stage"),
    ({"dockerfile": "FROM python:3.12\nWORKDIR /app\nCOPY x.py /etc/x.py\n", "environment/x.py": ""}, "line 3: COPY to /etc/x.py is outside the workspace /app"),
    ({"dockerfile": "FROM python:3.12\nWORKDIR /app\nCOPY missing.py .\n"}, "line 3: COPY source missing.py is not in environment/"),
    ({"dockerfile": "FROM python:3.12\nWORKDIR /app\nCOPY ../secret .\n"}, "line 3: COPY ../secret reaches outside environment/"),
    ({"dockerfile": "FROM python:3.12\nFROM debian\n"}, "line 2: a second FROM needs a multi-stage build"),
    ({"environment/docker-compose.yaml": "services: {}\n"}, "needs services (environment/docker-compose.yaml); the sandbox runs one workspace"),
    ({"toml": "[environment]\nallow_internet = true\n"}, "needs internet access (allow_internet = true); the sandbox has none"),
    ({"toml": "[environment]\ndocker_image = \"org/img:1\"\n"}, "needs the image org/img:1 (docker_image)"),
    ({"toml": "[environment]\ngpus = 1\n"}, "needs 1 GPU(s); the sandbox has none"),
    ({"toml": "[environment]\nmemory = \"32G\"\n"}, "needs 32768 MB of memory; the sandbox allows 16384"),
    ({"toml": "[environment]\nmemory_mb = 20000\n"}, "needs 20000 MB of memory; the sandbox allows 16384"),
    ({"toml": "[environment]\ncpus = 64\n"}, "needs 64 CPUs; the sandbox allows 4"),
    ({"toml": "[verifier]\ntimeout_sec = 900\n"}, "needs a 900 s verifier; the sandbox runs a command for at most 300 s"),
    ({"toml": "[agent]\ntimeout_sec = -1\n"}, "task.toml: [agent] timeout_sec must be a positive number, got -1"),
    ({"toml": "[verifier\ntimeout_sec = 1\n"}, "task.toml does not parse: "),
    ({"toml": "[[steps]]\nname = \"a\"\n"}, "needs several steps ([[steps]]); one episode is one step"),
]  # fmt: skip


@pytest.mark.parametrize(("spec", "message"), REFUSALS)
def test_what_the_sandbox_cannot_provide_is_refused_in_one_line_naming_the_task(tmp_path, spec, message):
    spec = dict(spec)
    d = make_task(
        tmp_path, "needy", toml=spec.pop("toml", TOML), dockerfile=spec.pop("dockerfile", None), **spec
    )
    with pytest.raises(HarborTaskError) as err:
        read_task(d)
    line = str(err.value)
    assert "\n" not in line and line.startswith("harbor task 'needy': ") and message in line, line


def test_missing_parts_are_one_line_and_a_folder_read_keeps_the_others(tmp_path):
    make_task(tmp_path, "good")
    no_instruction = make_task(tmp_path, "a_no_instruction")
    (no_instruction / "instruction.md").unlink()
    no_test = make_task(tmp_path, "b_no_test")
    (no_test / "tests" / "test.sh").unlink()
    make_task(tmp_path, "c_bad_toml", toml="version = \n")
    make_task(tmp_path, "d_big", **{"environment/blob.bin": "x" * 2000})
    read = read_tasks(tmp_path, Limits(workspace_bytes=1000))
    assert [t.name for t in read.tasks] == ["good"]
    assert read.refused[:3] == (
        "harbor task 'a_no_instruction': no instruction.md",
        "harbor task 'b_no_test': no tests/test.sh",
        read.refused[2],
    )
    assert read.refused[2].startswith("harbor task 'c_bad_toml': task.toml does not parse: ")
    assert read.refused[3] == "harbor task 'd_big': its files take 0.0 MB; the limit is 0.000953674 MB"


def test_the_builtin_tasks_are_all_read_with_their_families_and_split():
    tasks = builtin_tasks()
    families = {key.split("/")[0] for key, _ in tasks}
    assert len(tasks) >= 40 and families == set(TRAIN_FAMILIES) | set(VAL_FAMILIES)
    assert len({t.name for _, t in tasks}) == len(tasks)  # a row names its task by name alone
    keys = {key for key, _ in tasks}
    assert set(HELD_OUT_TASKS) <= keys
    for family in TRAIN_FAMILIES:  # every training family trains on most and holds out some
        held = [k for k in HELD_OUT_TASKS if k.startswith(family + "/")]
        assert 1 <= len(held) < sum(k.startswith(family + "/") for k in keys) - 2
    for _, task in tasks:
        assert 1 <= len(task.files) <= 4 and task.verifier_timeout_s == 60.0
        assert task.metadata["kind"] in ("fix", "implement", "refactor")
        assert task.metadata["check_command"] == "python3 -m unittest -q"


def test_rows_carry_what_the_rollout_needs_and_read_back():
    train, val = rows("train", 0), rows("val", 0)
    assert len(train) == 30 and len(val) == 15
    assert {r["data_source"] for r in val} == {"turnrl/harbor/new_task", "turnrl/harbor/new_family"}
    assert rows("train", 0) == train and rows("train", 1) != train
    assert len(rows("train", 0, n_train=70)) == 70
    row = json.loads(json.dumps(train[0]))  # as a JSONL file holds it
    task = task_from_row(row)
    original = dict(builtin_tasks())[f"{row['extra_info']['family']}/{row['extra_info']['task']}"]
    assert (
        task.files == original.files and task.tests == original.tests and task.solution == original.solution
    )
    assert (task.agent_timeout_s, task.verifier_timeout_s) == (600.0, 60.0)
    assert original.instruction.strip() in row["prompt"][0]["content"]
    assert row["reward_model"]["ground_truth"] == task.name and row["extra_info"]["split"] == "train"
    assert set(TASKS["harbor"].data_sources) == {r["data_source"] for r in train + val}
    with pytest.raises(ValueError, match="takes no argument 'size'"):
        rows("train", 0, size=3)
    with pytest.raises(HarborTaskError, match="scored by its verifier"):
        TASKS["harbor"].scorer("turnrl/harbor", "", task.name, {})
