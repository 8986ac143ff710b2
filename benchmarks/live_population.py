"""A simulated population of clients for `turnrl live serve`: scripted users of a built-in task.

Each user opens a session, asks one training question of the task (the row's own messages) through
the `openai` SDK, reads the answer, closes the session and scores the answer with the task's own
scorer, as a user who checks the result would. Most reward at once; `--late` of them after a delay of
up to `--late-max-s`; `--never` of them never (the server drops those after `live.reward_window_s`).
Every question is asked by `--group` users (the server's `live.group_size`), so groups form by prompt.

    turnrl live serve live_addition live.keys_file=keys.json trainer.default_local_dir=runs/live &
    python benchmarks/live_population.py --url http://127.0.0.1:PORT --key KEY --task addition \\
        --sessions 640 --group 8

Prints what it sent and the server's `/status` at the end. Held-out accuracy per policy version is
the server run's own validation (`trainer.test_freq`; `turnrl report RUN`).
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import openai

from turnrl.tasks import scorers, write_task


def score_of(row: dict[str, Any], text: str) -> float:
    """The task's own score of `text` as an answer to `row`."""
    fn = scorers()[row["data_source"]]
    out = fn(row["data_source"], text, row["reward_model"]["ground_truth"], row.get("extra_info"))
    return float(out["score"] if isinstance(out, dict) else out)


class Population:
    def __init__(self, args: argparse.Namespace, rows: list[dict[str, Any]]) -> None:
        self.args, self.rows = args, rows
        self.rng = random.Random(args.seed)
        self.counts: Counter[str] = Counter()
        self.lock = threading.Lock()
        self.versions: Counter[int] = Counter()
        self.late: list[threading.Timer] = []

    def session(self, i: int) -> None:
        a = self.args
        row = self.rows[(i // a.group) % len(self.rows)]  # `group` users ask each question in turn
        sid = f"{a.prefix}-{i}"
        with self.lock:
            fate = self.rng.random()
            delay = self.rng.uniform(0, a.late_max_s)
        client = openai.OpenAI(base_url=f"{a.url}/sessions/{sid}/v1", api_key=a.key, max_retries=2)
        try:
            reply = client.chat.completions.create(model="policy", messages=row["prompt"])
        except openai.APIError as err:
            with self.lock:
                self.counts[f"refused/{getattr(err, 'status_code', 'error')}"] += 1
            return
        text = reply.choices[0].message.content or ""
        self._post(f"/sessions/{sid}/close", {})
        reward = score_of(row, text)
        with self.lock:
            self.versions[int(reply.model_extra.get("policy_version", -1))] += 1
            self.counts["sessions"] += 1
            self.counts["reward_sum_x1000"] += int(1000 * reward)
        if fate < a.never:
            self._count("never_rewarded")
        elif fate < a.never + a.late:
            timer = threading.Timer(delay, self._reward, (sid, reward, "late"))
            timer.start()
            with self.lock:
                self.late.append(timer)
        else:
            self._reward(sid, reward, "at_once")

    def _reward(self, sid: str, reward: float, how: str) -> None:
        response = self._post(f"/sessions/{sid}/reward", {"reward": reward})
        self._count(
            f"rewarded/{how}" if response.status_code == 200 else f"reward_refused/{response.status_code}"
        )

    def _post(self, path: str, body: dict[str, Any]) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.args.key}"}
        return httpx.post(f"{self.args.url}{path}", json=body, headers=headers, timeout=600)

    def _count(self, key: str) -> None:
        with self.lock:
            self.counts[key] += 1

    def run(self) -> None:
        start = time.monotonic()
        with ThreadPoolExecutor(self.args.concurrency) as pool:
            list(pool.map(self.session, range(self.args.sessions)))
        for timer in self.late:
            timer.join()
        self.counts["seconds"] = int(time.monotonic() - start)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True)
    p.add_argument("--key", required=True)
    p.add_argument("--task", default="addition", help="a built-in task; its training split is asked")
    p.add_argument("--task-seed", type=int, default=0, help="the server's trainer.seed: the same split")
    p.add_argument("--sessions", type=int, default=640)
    p.add_argument("--group", type=int, default=8, help="users asking each question (live.group_size)")
    p.add_argument("--concurrency", type=int, default=16)
    p.add_argument("--late", type=float, default=0.3, help="share of users who reward late")
    p.add_argument("--late-max-s", type=float, default=20.0)
    p.add_argument("--never", type=float, default=0.1, help="share of users who never reward")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--prefix", default="user", help="session ids are <prefix>-<i>")
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        files = write_task(args.task, tmp, args.task_seed)
        rows = [json.loads(line) for line in Path(files.train).read_text().splitlines()]
    population = Population(args, rows)
    population.run()
    status = httpx.get(f"{args.url}/status", headers={"Authorization": f"Bearer {args.key}"}).json()
    print(json.dumps({"sent": dict(population.counts), "answered_by_version": dict(population.versions)}))
    print(json.dumps({"server": status}))


if __name__ == "__main__":
    main()
