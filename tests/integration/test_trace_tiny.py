"""`turnrl trace` end to end on `tiny-random`: one real single-turn GRPO step, every stage on the page."""

import math
import re
import tempfile
from pathlib import Path

import pytest

from turnrl.cli import main
from turnrl.inspector.trace import run_trace
from turnrl.tracking.dump import dump_rollouts
from turnrl.trainer.stages import STAGES

# the stages the trainer records in a single-turn GRPO step (`update_actor`: the actor's first
# micro-batch with its per-token ratio), then the inspector's own two
RECORDED_STAGES = ("load_batch", "gen_batch", "gen", "group", "reward", "old_log_prob", "adv", "update_actor")
OWN_STAGES = ("after_update", "metrics")

# scores that differ between samples (so GRPO advantages are not all 0), from the text alone
VARIED_REWARD = "def compute_score(data_source, solution_str, ground_truth, extra_info=None):\n    return (sum(map(ord, solution_str)) % 7) / 6\n"


def overrides(tmp_path: Path) -> list[str]:
    reward = tmp_path / "varied_reward.py"
    reward.write_text(VARIED_REWARD)
    return ["model.path=tiny-random", "data.max_response_length=8", f"reward.custom_function.path={reward}"]


def trace_dirs() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).glob("turnrl-trace-*")}


@pytest.mark.timeout(180)
def test_trace_shows_every_recorded_stage(tmp_path):
    before = trace_dirs()
    result = run_trace(None, overrides(tmp_path), tmp_path / "out")
    html, md = result.html.read_text(), result.markdown.read_text()
    names = [v.name for v in result.views]
    assert names == [*RECORDED_STAGES, *OWN_STAGES]
    assert set(names) <= set(STAGES) | set(OWN_STAGES)  # the trainer's own stage names, no aliases
    update = result.views[names.index("update_actor")]
    assert update.elapsed_s > 0 and update.elapsed_s == pytest.approx(result.metrics["timing_s/update_actor"])
    after = next(r.batch for r in result.records if r.stage == "after_update")
    mask = after["response_mask"] > 0
    assert (after["ratio_after"][mask] > 0).all() and (after["ratio_after"][~mask] == 0).all()
    for view in result.views:  # every recorded stage, whatever the trainer records
        assert f'id="stage-{view.name}"' in html, view.name
        assert f"(`{view.name}`)" in md, view.name
        assert view.doc.title in html and view.doc.title in md
    assert [r.stage for r in result.records] == names[:-1]
    # the small default step: 2 prompts x 2 samples, 8 response tokens
    adv = result.views[names.index("adv")]
    shapes = {f.name: f.shape for f in adv.fields}
    assert shapes.get("advantages", "(4, 8)") == "(4, 8)" and adv.size == 4
    assert {f.name: f.status for f in adv.fields}["advantages"] == "new"
    # GRPO with n=2, hand-worked: scores a != b give (a - mean) / std = ±(a-b)/2 / (|a-b|/√2) = ±1/√2
    batch = next(r.batch for r in result.records if r.stage == "adv")
    for row in range(4):
        mask = batch["response_mask"][row] > 0
        values = set(batch["advantages"][row][mask].tolist())
        assert len(values) == 1  # one advantage per sequence, on model tokens only
        assert min(abs(next(iter(values))), abs(abs(next(iter(values))) - 1 / math.sqrt(2))) < 1e-4
        assert (batch["advantages"][row][~mask] == 0).all()
    # tokens on the page: 4 responses of model tokens, hover text with their values
    assert len(re.findall(r'<span class="t model', html)) >= 4 * 5
    assert "rollout_log_probs=" in html and "advantages=" in html and "ratio=" in html
    assert "| `actor/pg_loss` |" in md
    assert not re.search(r'(src|href)="(https?:)?//', html)
    assert trace_dirs() == before  # the temporary run directory is gone
    # the same snapshot dumps as rollouts (what trainer.rollout_dump_freq writes)
    from turnrl.models.loader import load_tokenizer

    path = dump_rollouts(tmp_path / "run", 1, batch, load_tokenizer("tiny-random"))
    assert len(path.read_text().splitlines()) == 4


@pytest.mark.timeout(180)
def test_cli_trace_into_a_given_run_dir_leaves_its_config(tmp_path, capsys):
    run = tmp_path / "run"
    run.mkdir()
    (run / "config.yaml").write_text("# the run's own config\n")
    out = tmp_path / "out"
    argv = [
        "trace",
        *overrides(tmp_path),
        f"trainer.default_local_dir={run}",
        "--out",
        str(out),
        "--samples",
        "1",
    ]
    assert main(argv) == 0
    assert (run / "config.yaml").read_text() == "# the run's own config\n"
    printed = capsys.readouterr().out
    assert f"trace: {out / 'trace.html'}" in printed and (out / "trace.md").is_file()
    html = (out / "trace.html").read_text()
    assert "3 more rows not shown" in html  # 4 samples, 1 shown per stage


def test_cli_trace_bad_override_is_one_line(tmp_path, capsys):
    assert main(["trace", "rollout.nn=2", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("turnrl trace: unknown config key 'rollout.nn'") and "\n" not in err
    assert not (tmp_path / "trace.html").exists()


@pytest.mark.timeout(240)
def test_trace_of_an_agent_recipe_shows_observations_and_the_update(tmp_path):
    recipe = Path(__file__).parents[2] / "examples" / "calculator_agent.yaml"
    extra = [
        "model.path=tiny-random",
        "data.max_response_length=24",
        "rollout.multi_turn.max_tokens_per_turn=8",
    ]
    result = run_trace(recipe, extra, tmp_path / "out")
    html = result.html.read_text()
    names = [v.name for v in result.views]
    assert "update_actor" in names and "gen" in names  # the actor's per-token ratio was recorded
    assert 'id="stage-update_actor"' in html and "observation" in html
