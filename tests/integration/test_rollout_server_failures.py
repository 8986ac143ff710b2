"""Rollout servers that die mid-run (`rollout.server`): the run's own `turnrl serve` child killed
with SIGKILL between steps is started again with the current weights, and an external server that
goes away is routed around, misses a sync, and comes back only once it loaded the current version.
Real `turnrl serve` processes on tiny-random, a real 3-step run."""

from __future__ import annotations

import json
import signal
import threading
import time
from pathlib import Path

import pytest
import torch

from tests.support.serving import EQ, KEY, TIME, serve_process
from tests.support.tiny_runs import tiny_overrides
from turnrl.config.schema import ServerConfig
from turnrl.rollout.base import SamplingParams
from turnrl.rollout.server import ServerEngine, ServerError


def steps_of(run: Path) -> list[dict]:
    if not (run / "metrics.jsonl").is_file():
        return []
    rows = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    return [r for r in rows if "critic/score/mean" in r]


@pytest.mark.slow
@pytest.mark.timeout(420)
def test_the_runs_own_server_killed_after_step_one_is_restarted_with_the_current_weights(tmp_path):
    """Before: `inference server unreachable after 4 attempts (rollout.server.max_retries=3)` and
    the run stopped. Now step 2 samples from a new child that loaded policy version 1: the
    trainer's log-probs equal the server's (so the weights are the trainer's), and every step has
    all its rows."""
    from turnrl.config import load_config
    from turnrl.trainer.ppo import Trainer

    overrides = tiny_overrides(
        tmp_path,
        **{"rollout.engine": "server", "trainer.total_training_steps": 3, "trainer.rollout_dump_freq": 1},
    )
    trainer = Trainer(load_config(None, overrides))
    child = trainer.engine.child
    first_pid = child.pid
    run = trainer.run_dir
    killed = threading.Event()
    pids: list[int] = []

    def kill_after_step_one() -> None:
        while not steps_of(run):
            time.sleep(0.05)
        child.process.send_signal(signal.SIGKILL)
        killed.set()
        while len(steps_of(run)) < 2:
            time.sleep(0.05)
        pids.append(child.pid)  # the process that served step 2

    threading.Thread(target=kill_after_step_one, daemon=True).start()
    trainer.fit()
    assert killed.is_set() and pids and pids[0] != first_pid  # a new process, on the same port
    steps = steps_of(run)
    assert [s["rollout/policy_version/max"] for s in steps] == [0.0, 1.0, 2.0]
    assert [s["rollout/server/restarts"] for s in steps][-1] == 1.0
    for s in steps:
        assert s["rollout_corr/abs_diff_max"] < 1e-4, s["rollout_corr/abs_diff_max"]  # the trainer's weights
    # every step dumped all its rows: batch x n, none lost or sampled twice
    rows = trainer.cfg.data.train_batch_size * trainer.cfg.rollout.n
    for step in (1, 2, 3):
        dump = run / "rollouts" / f"step_{step}.jsonl"
        assert len(dump.read_text().splitlines()) == rows, step


@pytest.mark.slow
def test_an_external_server_gone_is_routed_around_and_rejoins_at_the_current_version(tiny, tmp_path):
    """Two external `turnrl serve` processes; one is killed. Generation goes on through the other,
    the weight sync it misses leaves it stale (it serves nothing), and once it is up again it loads
    the current version before it serves. With both gone, one line."""
    model = tiny[0]
    root = tmp_path / "weights"
    root.mkdir()
    a, b = serve_process(root).start(), serve_process(root).start()
    try:
        cfg = ServerConfig(urls=[a.url, b.url], max_retries=2, timeout_s=30)
        engine = ServerEngine(
            [a.url, b.url],
            cfg,
            eos_ids=set(),
            vocab_size=int(model.config.vocab_size),
            weights=lambda: {k: v + 0.01 for k, v in model.state_dict().items()},
            weights_dir=root,
            model_config=model.config,
            api_key=KEY,
        )
        engine.down_retry_s = 0.0
        params = SamplingParams(n=2, max_new_tokens=4, temperature=1.0)
        b.process.send_signal(signal.SIGKILL)
        b.process.wait(10)
        gen = engine.generate([EQ, TIME] * 4, params)  # 16 rows: some requests met b, and went to a
        assert all(len(ids) == 4 for ids in gen.response_ids) and len(gen.response_ids) == 16
        engine.sync_weights(1)  # b misses version 1
        assert engine.stale == {b.url} and engine.counters()["servers_down"] == 1.0
        gen = engine.generate([EQ, TIME] * 4, params)
        assert gen.policy_version == 1 and engine.completed[b.url] == 0
        b.restart()  # back, at its start weights: it must load version 1 before it serves
        gen = engine.generate([EQ, TIME] * 4, params)
        assert engine.stale == set() and gen.policy_version == 1
        assert engine.completed[b.url] > 0  # it served again, at version 1 (versions are checked)
        a.stop()
        b.stop()
        with pytest.raises(ServerError, match="unreachable"):
            engine.generate([EQ], params)
        engine.close()
    finally:
        a.stop()
        b.stop()
    assert torch.isfinite(torch.tensor(gen.log_probs[0])).all()


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_fault_soak_twenty_steps_with_the_server_killed_three_times(tmp_path):
    """The run's own `turnrl serve` child killed with SIGKILL at random moments (during generation,
    a weight sync or between them), three times in a 20-step run: the run ends, every step dumped
    all its rows, every step was sampled at the trainer's version, and three restarts are counted."""
    import random

    from turnrl.config import load_config
    from turnrl.trainer.ppo import Trainer

    steps_total = 20
    overrides = tiny_overrides(
        tmp_path,
        **{
            "rollout.engine": "server",
            "trainer.total_training_steps": steps_total,
            "trainer.rollout_dump_freq": 1,
        },
    )
    trainer = Trainer(load_config(None, overrides))
    child, run = trainer.engine.child, trainer.run_dir
    rng = random.Random(7)
    at = sorted(rng.sample(range(2, steps_total - 1), 3))  # after these steps, plus a random delay
    kills: list[int] = []

    def killer() -> None:
        for step in at:
            while len(steps_of(run)) < step:
                time.sleep(0.02)
            time.sleep(rng.uniform(0.0, 1.5))  # somewhere in the next step's generation or sync
            if child.process is not None and child.alive():
                child.process.send_signal(signal.SIGKILL)
                kills.append(step)

    threading.Thread(target=killer, daemon=True).start()
    trainer.fit()
    steps = steps_of(run)
    assert len(steps) == steps_total and len(kills) == 3
    assert [s["rollout/policy_version/max"] for s in steps] == [float(v) for v in range(steps_total)]
    assert steps[-1]["rollout/server/restarts"] == 3.0
    rows = trainer.cfg.data.train_batch_size * trainer.cfg.rollout.n
    for step in range(1, steps_total + 1):
        assert len((run / "rollouts" / f"step_{step}.jsonl").read_text().splitlines()) == rows, step
    for s in steps:
        assert s["rollout_corr/abs_diff_max"] < 1e-4, (s["step"], s["rollout_corr/abs_diff_max"])


def test_a_weight_sync_that_hangs_fails_in_one_line_within_the_timeout(tiny, tmp_path):
    """A server that answers /health and /v1/models but never answers a weight load (a real HTTP
    server on loopback that sleeps): the sync stops after `timeout_s` x (max_retries + 1), in one
    line naming the server, the version and the timeout."""
    import http.server
    import json as json_

    model = tiny[0]
    vocab = int(model.config.vocab_size)

    class Hung(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):  # quiet
            pass

        def do_GET(self):
            body = (
                {"status": "ok", "vocab_size": vocab} if self.path == "/health" else {"data": [{"id": "m"}]}
            )
            data = json_.dumps(body).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_POST(self):
            time.sleep(30)  # a load that never finishes in time

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hung)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        engine = ServerEngine(
            [url],
            ServerConfig(urls=[url], timeout_s=1, max_retries=1),
            eos_ids=set(),
            vocab_size=vocab,
            weights=model.state_dict,
            weights_dir=tmp_path / "w",
            model_config=model.config,
        )
        start = time.monotonic()
        with pytest.raises(ServerError) as err:
            engine.sync_weights(1)
        waited = time.monotonic() - start
        message = str(err.value)
        assert f"inference server {url} unreachable while loading policy version 1" in message
        assert "rollout.server.timeout_s=1s" in message and "\n" not in message
        assert waited < 10, waited  # 2 attempts of 1 s, plus writing the weights
        engine.close()
    finally:
        server.shutdown()
