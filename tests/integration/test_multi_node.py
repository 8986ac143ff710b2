"""`trainer.nnodes=2`: the multi-node path on a two-node Ray cluster started on this machine.

The cluster has a head and a second node, each with its own Ray processes (raylet, object store)
and resources of its own: 2 CPUs each and a custom resource naming the node. With
`trainer.nnodes=2 trainer.n_gpus_per_node=1` the run joins it through `trainer.ray_address`, puts
one rank on each node (2 CPUs would have held both ranks on the head) and its step equals the
one-rank step to float rounding, as two ranks on one node do (test_distributed.py).
"""

from __future__ import annotations

import pytest

from tests.support.ranks import GRPO, WEIGHT_TOL, assert_same
from tests.support.tiny_runs import assert_same_weights, read_metrics, tiny_overrides
from turnrl.config import load_config
from turnrl.trainer.ppo import Trainer

ray = pytest.importorskip("ray")
from ray.cluster_utils import Cluster  # noqa: E402

KEYS = ("critic/score/mean", "actor/pg_loss", "actor/grad_norm", "actor/entropy")


@pytest.fixture
def two_nodes():
    cluster = Cluster(
        initialize_head=True,
        head_node_args={"num_cpus": 2, "resources": {"head_node": 1}, "include_dashboard": False},
    )
    try:
        cluster.add_node(num_cpus=2, resources={"second_node": 1})
        cluster.wait_for_nodes()
        yield cluster
    finally:
        if ray.is_initialized():
            ray.shutdown()
        cluster.shutdown()


def node_of(worker) -> str:
    """The id of the Ray node a rank's process runs on."""
    return ray.get(worker.__ray_call__.remote(lambda self: ray.get_runtime_context().get_node_id()))


@pytest.mark.slow  # ~4 min on 2 busy cores (two Ray nodes, their rank processes, two runs): -m slow
@pytest.mark.timeout(600)
def test_two_nodes_place_one_rank_each_and_equal_one_rank(tmp_path, two_nodes):
    over = {**GRPO, "trainer.total_training_steps": 1, "trainer.device": "cpu"}
    one = Trainer(load_config(None, tiny_overrides(tmp_path / "one", **over))).fit()

    nodes = {"trainer.nnodes": 2, "trainer.n_gpus_per_node": 1, "trainer.ray_address": two_nodes.address}
    trainer = Trainer(load_config(None, tiny_overrides(tmp_path / "two", **over, **nodes)))
    placed = [node_of(w) for w in trainer.actor.group.workers]
    cluster_nodes = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
    assert len(placed) == 2 and set(placed) == cluster_nodes, (placed, cluster_nodes)  # one rank per node
    two = trainer.fit()

    rows = [[r for r in read_metrics(run) if "critic/score/mean" in r] for run in (one, two)]
    assert rows[0][0]["actor/grad_norm"] > 0  # the reward moves the policy: not a trivial comparison
    assert_same(rows[0], rows[1], KEYS)
    assert_same_weights(
        one / "checkpoints" / "step_1" / "actor", two / "checkpoints" / "step_1" / "actor", WEIGHT_TOL
    )
