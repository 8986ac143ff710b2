"""`turnrl tinker serve` driven by the unmodified `tinker` SDK: a real server on localhost (uvicorn in
a thread of this process), tiny-random on CPU in fp32.

What the SDK's calls do is checked against what they must do, independently of the server's code:
a sampled token's log-prob and `compute_logprobs` against a plain forward pass of a fresh tiny-random
with the saved adapter loaded by peft's own `PeftModel.from_pretrained`; the policy-gradient losses
against their formulas evaluated here by hand on the log-probs the server returned.
"""

from __future__ import annotations

import itertools
import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import torch

tinker = pytest.importorskip("tinker")
from tinker import types  # noqa: E402

from tests.support.tinker_server import Served, plain_logprobs, served_under  # noqa: E402
from turnrl.models.loader import load_model  # noqa: E402

KEY = "tml-" + secrets.token_hex(8)
BASE = "tiny-random"
SENTENCES = [
    [504, 3575, 282, 4649, 314, 7042, 30, 216, 1232],
    [33, 1232, 216, 33, 446, 6403, 1980, 253, 655, 28],
]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with served_under(BASE, tmp_path_factory.mktemp("tinker_state"), KEY, poll_wait_s=0.01) as running:
        yield running


@pytest.fixture(scope="module")
def sdk(served: Served) -> Iterator[tinker.ServiceClient]:
    client = tinker.ServiceClient(base_url=served.url, api_key=KEY)
    yield client
    client.close("success").result(timeout=30)


def datum(ids: list[int], weights: list[float] | None = None) -> types.Datum:
    """Next-token training on `ids`: input ids[:-1], targets ids[1:]."""
    n = len(ids) - 1
    return types.Datum(
        model_input=types.ModelInput.from_ints(ids[:-1]),
        loss_fn_inputs={"target_tokens": ids[1:], "weights": weights if weights is not None else [1.0] * n},
    )


BATCH = [datum(s) for s in SENTENCES]


def lora_client(sdk: tinker.ServiceClient, seed: int, rank: int = 4):  # type: ignore[no-untyped-def]
    return sdk.create_lora_training_client(base_model=BASE, rank=rank, seed=seed).result(timeout=60)


def step(client, lr: float = 1e-2) -> float:  # type: ignore[no-untyped-def]
    """One forward_backward(cross_entropy) + optim_step, both submitted before waiting; the loss."""
    fwd = client.forward_backward(BATCH, "cross_entropy")
    opt = client.optim_step(types.AdamParams(learning_rate=lr))
    loss = fwd.result(timeout=60).metrics["loss:sum"]
    opt.result(timeout=60)
    return loss


def logprobs_of(client, data=BATCH) -> list[np.ndarray]:  # type: ignore[no-untyped-def]
    out = client.forward(data, "cross_entropy").result(timeout=60)
    return [o["logprobs"].to_numpy() for o in out.loss_fn_outputs]


def checkpoint_dir(served: Served, tinker_path: str) -> Path:
    """Where the server keeps a tinker:// checkpoint (docs/tinker.md: <state root>/<run>/<kind>/<name>)."""
    return served.root / tinker_path.removeprefix("tinker://")


def adapted_model(path: Path) -> torch.nn.Module:
    """A fresh tiny-random (seed 0, as served) with the checkpoint's adapter, loaded by peft itself."""
    from peft import PeftModel

    base, _ = load_model(BASE, torch.device("cpu"), seed=0)
    return PeftModel.from_pretrained(base, str(path)).eval()


def test_cross_entropy_loss_falls_over_five_steps(sdk):
    client = lora_client(sdk, seed=0)
    info = client.get_info()
    assert info.model_data.model_name == BASE and info.lora_rank == 4
    # the tokenizer the SDK loads from get_info's tokenizer_id (a local directory, no hub)
    assert client.get_tokenizer().encode("Paris", add_special_tokens=False)
    losses = [step(client, lr=5e-3) for _ in range(5)]
    assert all(b < a for a, b in itertools.pairwise(losses)), losses
    assert losses[-1] < 0.8 * losses[0], losses


def test_samples_and_compute_logprobs_equal_a_plain_forward_of_the_adapted_model(sdk, served):
    client = lora_client(sdk, seed=1)
    for _ in range(3):
        step(client)
    path = client.save_weights_for_sampler("after-3").result(timeout=60).path
    reference = adapted_model(checkpoint_dir(served, path))
    prompt = SENTENCES[0][:5]
    params = types.SamplingParams(max_tokens=6, temperature=1.0, seed=7)
    # two ways to a sampler at these weights: the snapshot session, and the named checkpoint
    for sampler in (
        client.save_weights_and_get_sampling_client().result(timeout=60),
        sdk.create_sampling_client(model_path=path).result(timeout=60),
    ):
        result = sampler.sample(types.ModelInput.from_ints(prompt), 3, params).result(timeout=60)
        assert len(result.sequences) == 3
        assert len({s.sequence_id for s in result.sequences}) == 3
        for seq in result.sequences:
            assert 1 <= len(seq.tokens) <= 6 and len(seq.logprobs) == len(seq.tokens)
            assert seq.stop_reason in ("stop", "length")
            expected = plain_logprobs(reference, prompt, seq.tokens)
            np.testing.assert_allclose(seq.logprobs, expected, atol=1e-4)
        scored = sampler.compute_logprobs(types.ModelInput.from_ints(SENTENCES[1])).result(timeout=60)
        assert scored[0] is None
        expected = plain_logprobs(reference, SENTENCES[1][:1], SENTENCES[1][1:])
        np.testing.assert_allclose(np.array(scored[1:], dtype=np.float64), expected, atol=1e-4)
    # the same seed samples the same tokens; stop token ids end a sequence at them; stop=[] never stops
    again = sampler.sample(types.ModelInput.from_ints(prompt), 3, params).result(timeout=60)
    assert [s.tokens for s in again.sequences] == [s.tokens for s in result.sequences]
    # and they are what turnrl's own engine samples from the same weights with the same seed
    from turnrl.rollout.base import SamplingParams
    from turnrl.rollout.hf import HFEngine

    _, tok = load_model(BASE, torch.device("cpu"), seed=0)
    own = HFEngine(reference, tok).generate(
        [prompt], SamplingParams(max_new_tokens=6, n=3, temperature=1.0, seed=7)
    )
    assert own.response_ids == [s.tokens for s in result.sequences]
    for lps, seq in zip(own.log_probs, result.sequences, strict=True):
        np.testing.assert_allclose(seq.logprobs, lps, atol=1e-4)
    first = result.sequences[0].tokens[0]
    stopped = sampler.sample(
        types.ModelInput.from_ints(prompt), 3, params.model_copy(update={"stop": [first]})
    )
    seq = stopped.result(timeout=60).sequences[0]
    assert (seq.tokens, seq.stop_reason) == ([first], "stop")
    endless = sampler.sample(types.ModelInput.from_ints(prompt), 2, params.model_copy(update={"stop": []}))
    assert [(len(s.tokens), s.stop_reason) for s in endless.result(timeout=60).sequences] == [
        (6, "length")
    ] * 2


def test_policy_gradient_losses_equal_their_formulas(sdk):
    client = lora_client(sdk, seed=2)
    step(client)
    rng = np.random.default_rng(0)
    lp = logprobs_of(client)
    # the "sampler's" log-probs, off by steps that put the ratio r = exp(lp - q) below, inside and above
    # the PPO range and above CISPO's, and advantages of both signs: every clip binds somewhere
    q = [(x + rng.choice([0.5, -0.5, -1.6, 0.05], x.shape)).astype(np.float32) for x in lp]
    adv = [(rng.choice([-1.0, 1.0], x.shape) * (0.5 + np.abs(rng.normal(size=x.shape)))).astype(np.float32) for x in lp]  # fmt: skip
    data = [
        types.Datum(
            model_input=d.model_input,
            loss_fn_inputs={
                "target_tokens": d.loss_fn_inputs["target_tokens"],
                "logprobs": q[i],
                "advantages": adv[i],
            },
        )
        for i, d in enumerate(BATCH)
    ]
    r = [np.exp(x.astype(np.float64) - y) for x, y in zip(lp, q, strict=True)]
    r_all, a_all = np.concatenate(r), np.concatenate(adv)
    assert ((r_all < 0.8) & (a_all < 0)).any() and ((r_all > 1.2) & (a_all > 0)).any()  # PPO's clip binds
    assert (r_all > 4.0).any() and ((r_all > 0.8) & (r_all < 1.2)).any()  # CISPO's too; some unclipped

    def hand(per_token) -> float:  # type: ignore[no-untyped-def]
        return float(sum(per_token(lp[i].astype(np.float64), r[i], adv[i]).sum() for i in range(len(lp))))

    cases = [
        ("importance_sampling", None, lambda lpi, ri, a: -ri * a),
        ("ppo", None, lambda lpi, ri, a: -np.minimum(ri * a, np.clip(ri, 0.8, 1.2) * a)),
        (
            "ppo",
            {"clip_low_threshold": 0.9, "clip_high_threshold": 1.05},
            lambda lpi, ri, a: -np.minimum(ri * a, np.clip(ri, 0.9, 1.05) * a),
        ),
        ("cispo", None, lambda lpi, ri, a: -np.clip(ri, 0.0, 4.0) * lpi * a),
        ("dro", {"beta": 0.3}, lambda lpi, ri, a: -(lpi * a - 0.5 * 0.3 * np.log(ri) ** 2)),
    ]
    for loss_fn, config, per_token in cases:
        out = client.forward_backward(data, loss_fn, config).result(timeout=60)
        assert out.metrics["loss:sum"] == pytest.approx(hand(per_token), rel=1e-5, abs=1e-4), loss_fn
        for i, o in enumerate(out.loss_fn_outputs):  # the log-probs the loss was computed from
            np.testing.assert_allclose(o["logprobs"].to_numpy(), lp[i], atol=1e-5)
            assert o["elementwise_loss"].shape == list(lp[i].shape)

    # GSPO: one ratio per datum, the geometric mean over its tokens of weight 1 (not the first two)
    weights = [np.r_[0.0, 0.0, np.ones(len(x) - 2)].astype(np.float32) for x in lp]
    weighted = [
        types.Datum(model_input=d.model_input, loss_fn_inputs={**d.loss_fn_inputs, "weights": weights[i]})
        for i, d in enumerate(data)
    ]
    out = client.forward_backward(weighted, "gspo", {"clip_low_threshold": 0.9, "clip_high_threshold": 1.1}).result(timeout=60)  # fmt: skip
    expected = 0.0
    for i in range(len(lp)):
        s = np.exp(np.log(r[i])[2:].mean())
        expected += float((-weights[i] * np.minimum(s * adv[i], np.clip(s, 0.9, 1.1) * adv[i])).sum())
    assert out.metrics["loss:sum"] == pytest.approx(expected, rel=1e-5, abs=1e-4)

    # a custom loss runs in the SDK, over this server's forward and a cross_entropy backward whose
    # weights are the loss's gradient (negative ones included)
    def custom(batch, logprobs):  # type: ignore[no-untyped-def]
        loss = sum(-(x * torch.from_numpy(adv[i])).sum() for i, x in enumerate(logprobs))
        return loss, {"custom:sum": float(loss)}

    out = client.forward_backward_custom(BATCH, custom).result(timeout=60)
    expected = sum(float(-(lp[i].astype(np.float64) * adv[i]).sum()) for i in range(len(lp)))
    assert out.metrics["loss:sum"] == pytest.approx(expected, rel=1e-5, abs=1e-4)
    assert out.metrics["surrogate_loss:sum"] == pytest.approx(expected, rel=1e-4, abs=1e-3)


def test_save_state_then_load_state_gives_the_same_next_step(sdk, served):
    trained = lora_client(sdk, seed=3)
    step(trained)
    step(trained)
    path = trained.save_state("two-steps").result(timeout=60).path
    assert path.endswith("/weights/two-steps")
    status, message = refused(lambda: trained.save_state("two-steps").result(timeout=30))
    assert status == 400 and message.endswith("already exists (save with overwrite=True to replace it)")
    rest = tinker.RestClient(base_url=served.url, api_key=KEY)
    listed = rest.list_checkpoints(trained.model_id).result(timeout=30).checkpoints
    assert [(c.checkpoint_id, c.checkpoint_type, c.tinker_path) for c in listed] == [
        ("weights/two-steps", "training", path)
    ]
    restored = sdk.create_training_client_from_state_with_optimizer(path).result(timeout=60)
    assert restored.get_info().lora_rank == 4
    legacy = lora_client(sdk, seed=99)  # another init, overwritten by the loaded state
    with pytest.warns(FutureWarning):
        load = legacy.load_state_with_optimizer(path)
    load.result(timeout=60)
    weights_only = sdk.create_training_client_from_state(path).result(timeout=60)
    np.testing.assert_array_equal(np.concatenate(logprobs_of(restored)), np.concatenate(logprobs_of(trained)))

    outcome = {}
    for name, client in [("trained", trained), ("restored", restored), ("legacy", legacy), ("fresh_adam", weights_only)]:  # fmt: skip
        loss = step(client)
        outcome[name] = (loss, client.forward(BATCH, "cross_entropy").result(timeout=60).metrics["loss:sum"])
    assert outcome["restored"] == pytest.approx(outcome["trained"], abs=1e-6)
    assert outcome["legacy"] == pytest.approx(outcome["trained"], abs=1e-6)
    # the same weights (same loss before the step), but Adam without its moments steps elsewhere
    assert outcome["fresh_adam"][0] == pytest.approx(outcome["trained"][0], abs=1e-6)
    assert outcome["fresh_adam"][1] != pytest.approx(outcome["trained"][1], abs=1e-4)


def test_two_training_clients_stay_independent(sdk):
    a, b = lora_client(sdk, seed=4), lora_client(sdk, seed=4)
    step(b)
    before_b, before_a = logprobs_of(b), logprobs_of(a)
    for _ in range(2):
        step(a)
    for x, y in zip(logprobs_of(b), before_b, strict=True):
        np.testing.assert_array_equal(x, y)  # stepping a left b's adapter exactly as it was
    assert not np.allclose(np.concatenate(logprobs_of(a)), np.concatenate(before_a))


def refused(call) -> tuple[int, str]:  # type: ignore[no-untyped-def]
    """The status and one-line detail of the 4xx the SDK raises for `call()`."""
    with pytest.raises(tinker.APIStatusError) as info:
        call()
    err = info.value
    message = err.body["detail"]
    assert 400 <= err.status_code < 500 and "\n" not in message, (err.status_code, message)
    return err.status_code, message


def test_bad_input_is_a_one_line_4xx_and_the_server_keeps_answering(sdk, served, tmp_path):
    client = lora_client(sdk, seed=5)
    good = logprobs_of(client)

    status, message = refused(
        lambda: sdk.create_lora_training_client(base_model="nope", rank=4).result(timeout=30)
    )
    assert status == 404 and "'nope'" in message and "'tiny-random'" in message
    for rank in (0, 257):
        status, message = refused(lambda r=rank: sdk.create_lora_training_client(base_model=BASE, rank=r).result(timeout=30))  # fmt: skip
        assert status == 400 and message.startswith("lora_config.rank:") and "[1, 256]" in message

    # a loss the SDK names but this server does not compute, and one nobody names (raw protobuf)
    status, message = refused(lambda: client.forward_backward(BATCH, "stable_reinforce").result(timeout=30))
    assert status == 400 and "'stable_reinforce'" in message
    assert "cross_entropy, importance_sampling, ppo, cispo, dro, gspo" in message
    from tinker.proto.request_conv import forward_backward_request_to_proto

    request = types.ForwardBackwardRequest(
        forward_backward_input=types.ForwardBackwardInput(data=BATCH, loss_fn="cross_entropy"),
        model_id=client.model_id,
        seq_id=1,
    )
    body = forward_backward_request_to_proto(request)
    body.loss_fn = "nope"
    raw = httpx.post(
        served.url + "/api/v1/forward_backward",
        content=body.SerializeToString(),
        headers={"X-API-Key": KEY, "Content-Type": "application/x-protobuf"},
    )
    assert raw.status_code == 400 and "'nope'" in raw.json()["detail"] and "ppo" in raw.json()["detail"]

    # loss inputs that do not match the datum's tokens
    ids = SENTENCES[0]
    short_targets = types.Datum(
        model_input=types.ModelInput.from_ints(ids[:5]), loss_fn_inputs={"target_tokens": ids[1:5]}
    )
    status, message = refused(
        lambda: client.forward_backward([short_targets], "cross_entropy").result(timeout=30)
    )
    assert status == 400 and message.startswith(
        "data[0].loss_fn_inputs.target_tokens: 4 targets for 5 input tokens"
    )
    bad_weights = datum(ids, weights=[1.0, 1.0])
    status, message = refused(lambda: client.forward_backward([BATCH[1], bad_weights], "cross_entropy").result(timeout=30))  # fmt: skip
    assert status == 400 and message.startswith("data[1].loss_fn_inputs.weights: shape [2]")
    status, message = refused(lambda: client.forward_backward(BATCH, "ppo").result(timeout=30))
    assert status == 400 and "ppo needs 'logprobs'" in message

    # tinker:// paths that leave the state root, or are no checkpoint path at all
    outside = tmp_path / "outside" / "weights" / "x"
    outside.mkdir(parents=True)
    (served.root / "escape").symlink_to(tmp_path / "outside")
    for path in ("tinker://../x/weights/a", "tinker://run/weights/../../../etc", "/etc/passwd", "tinker://escape/weights/x"):  # fmt: skip
        status, message = refused(lambda p=path: sdk.create_training_client_from_state(p).result(timeout=30))
        assert status == 400 and message.startswith(f"path: {path!r}"), message
    with pytest.warns(FutureWarning):
        status, message = refused(lambda: client.load_state("tinker://../../x/weights/a").result(timeout=30))
    assert status == 400 and "'tinker://../../x/weights/a'" in message
    # a well-formed path with nothing there fails the future, as a user error
    with pytest.raises(tinker.RequestFailedError, match="no checkpoint at"):
        sdk.create_training_client_from_state(f"tinker://{client.model_id}/weights/missing").result(
            timeout=30
        )

    # sampling fields this server does not serve
    sampler = client.save_weights_and_get_sampling_client().result(timeout=60)
    prompt = types.ModelInput.from_ints(SENTENCES[0][:3])
    status, message = refused(lambda: sampler.sample(prompt, 1, types.SamplingParams()).result(timeout=30))
    assert message.startswith("sampling_params.max_tokens: required")
    two = types.SamplingParams(max_tokens=2)
    status, message = refused(
        lambda: sampler.sample(prompt, 1, two, topk_prompt_logprobs=2).result(timeout=30)
    )
    assert message == "topk_prompt_logprobs: not supported by this server"

    # an unknown future and an unknown route: one-line 404s
    headers = {"X-API-Key": KEY}
    unknown = httpx.post(served.url + "/api/v1/retrieve_future", json={"request_id": "nope"}, headers=headers)
    assert unknown.status_code == 404 and unknown.json()["detail"].startswith(
        "request_id: unknown future 'nope'"
    )
    nowhere = httpx.post(served.url + "/api/v1/weights_info", json={}, headers=headers)
    assert nowhere.status_code == 404 and "is not served by turnrl tinker serve" in nowhere.json()["detail"]
    assert httpx.get(served.url + "/api/v1/healthz").status_code == 401  # the key is required

    # and the server still answers, with the client's state unchanged
    for x, y in zip(logprobs_of(client), good, strict=True):
        np.testing.assert_array_equal(x, y)


def test_an_overflowing_gradient_or_step_is_refused_and_leaves_the_client_as_it_was(sdk, served):
    """A finite loss with a gradient past float32 (weights of -1e30), a learning rate past 1, and a
    step whose weight decay would make the weights infinite: each fails at once with one line, as a
    user error (a 500 had the SDK poll for ever), and the weights and optimizer state stay as they were."""
    client = lora_client(sdk, seed=6)
    good = logprobs_of(client)
    inf_grad = datum(SENTENCES[0], weights=[-1e30] * (len(SENTENCES[0]) - 1))  # a finite loss, -1e32
    with pytest.raises(tinker.RequestFailedError, match=r"data\[1\]: the cross_entropy loss \(-1.01e\+32\) has a gradient whose norm is past float32's range .*nothing was applied"):  # fmt: skip
        client.forward_backward([BATCH[1], inf_grad], "cross_entropy").result(timeout=60)
    # the refused request's gradients (its first datum's too) were dropped: there is nothing to step
    metrics = client.optim_step(types.AdamParams(learning_rate=1e-2)).result(timeout=60).metrics
    assert metrics["turnrl/grad_norm"] == 0.0 and metrics["turnrl/step"] == 1.0
    for x, y in zip(logprobs_of(client), good, strict=True):
        np.testing.assert_array_equal(x, y)
    for lr in (1e10, 1e308):
        status, message = refused(lambda lr=lr: client.optim_step(types.AdamParams(learning_rate=lr)).result(timeout=30))  # fmt: skip
        assert (
            status == 400 and message == f"adam_params.learning_rate: {lr:g} is out of range; must be [0, 1]"
        )

    # a weight decay that scales the weights by -1e38: a step leaves huge ones, whose outputs are NaN
    client.forward_backward(BATCH, "cross_entropy").result(timeout=60)
    client.optim_step(types.AdamParams(learning_rate=1.0, weight_decay=1e38)).result(timeout=60)
    sampler = client.save_weights_and_get_sampling_client().result(timeout=60)
    prompt, two = types.ModelInput.from_ints(SENTENCES[0][:3]), types.SamplingParams(max_tokens=2)
    with pytest.raises(tinker.RequestFailedError, match="the sampler's weights make the model's outputs NaN or infinite"):  # fmt: skip
        sampler.sample(prompt, 1, two).result(timeout=60)
    with pytest.raises(tinker.RequestFailedError, match="loss is nan"):
        client.forward_backward(BATCH, "cross_entropy").result(timeout=60)

    # one by -1e308 (-inf in float32) would make them infinite: refused, rolled back, gradients kept
    other = lora_client(sdk, seed=7)
    step(other)
    other.forward_backward(BATCH, "cross_entropy").result(timeout=60)
    before = checkpoint_dir(served, other.save_state("big").result(timeout=60).path)
    with pytest.raises(tinker.RequestFailedError, match=r"adam_params: this step .* would make the adapter's weights NaN or infinite; nothing was applied"):  # fmt: skip
        other.optim_step(types.AdamParams(learning_rate=1.0, weight_decay=1e308)).result(timeout=60)
    after = checkpoint_dir(served, other.save_state("still-big").result(timeout=60).path)
    from safetensors.torch import load_file

    weights = [load_file(d / "adapter_model.safetensors") for d in (before, after)]
    moments = [torch.load(d / "optimizer.pt", weights_only=True)["state"] for d in (before, after)]
    assert weights[0].keys() == weights[1].keys() and moments[0].keys() == moments[1].keys() and moments[0]
    assert all(torch.equal(weights[0][k], weights[1][k]) for k in weights[0])
    assert all(torch.equal(moments[0][k][m], moments[1][k][m]) for k in moments[0] for m in moments[0][k])
    metrics = other.optim_step(types.AdamParams(learning_rate=1e-3)).result(timeout=60).metrics
    assert metrics["turnrl/grad_norm"] > 0 and metrics["turnrl/step"] == 2.0


def test_session_heartbeat_and_finish(served):
    """The SDK's background calls, raw: a heartbeat keeps a session, finishing it frees its clients
    (their adapters) and a later heartbeat is told 410, on which the SDK stops beating."""
    headers = {"X-API-Key": KEY}

    def post(path: str, body: dict) -> httpx.Response:
        return httpx.post(served.url + "/api/v1/" + path, json=body, headers=headers)

    session = post("create_session", {"tags": [], "sdk_version": "0.38.0", "type": "create_session"})
    session_id = session.json()["session_id"]
    assert post("session_heartbeat", {"session_id": session_id}).json() == {"type": "session_heartbeat"}
    model = {"session_id": session_id, "model_seq_id": 0, "base_model": BASE, "lora_config": {"rank": 2}}
    created = post("create_model", model).json()
    while (result := post("retrieve_future", {"request_id": created["request_id"]}).json()).get("type") == "try_again":  # fmt: skip
        pass  # the fixture's server waits only 10 ms per poll
    assert result == {"model_id": f"{session_id}:train:0", "type": "create_model"}
    health = httpx.get(served.url + "/health", headers=headers).json()
    assert post(f"sessions/{session_id}/finish", {"reason": {"type": "success"}}).status_code == 200
    assert (
        httpx.get(served.url + "/health", headers=headers).json()["training_clients"]
        == health["training_clients"] - 1
    )
    gone = post("session_heartbeat", {"session_id": session_id})
    assert (
        gone.status_code == 410
        and gone.json()["detail"] == f"session_id: session {session_id!r} has finished"
    )
    unknown = post("session_heartbeat", {"session_id": "nope"})
    assert unknown.status_code == 404 and "\n" not in unknown.json()["detail"]
    typo = post("session_heartbeat", {"session_id": session_id, "sesion": 1})
    assert typo.status_code == 400 and typo.json()["detail"].startswith("sesion: unknown field")


def test_a_sampler_checkpoint_exports_to_a_hugging_face_model_with_the_samplers_logprobs(sdk, served, tmp_path, cli):  # fmt: skip
    """`turnrl export tinker://... --state-root ROOT --out DIR`: the adapter merged into its base
    (untied from the input embeddings: the adapter trains the tied output layer), loaded by
    transformers alone, scores fixed tokens as the server's sampler of that checkpoint does."""
    from transformers import AutoModelForCausalLM

    client = lora_client(sdk, seed=6)
    for _ in range(2):
        step(client)
    path = client.save_weights_for_sampler("to-export").result(timeout=60).path
    out = tmp_path / "hf"
    result = cli("export", path, "--state-root", str(served.root), "--out", str(out))
    assert result.returncode == 0 and f"exported to {out}" in result.stdout, result.stderr
    assert not (out / "adapter_config.json").exists()
    exported = AutoModelForCausalLM.from_pretrained(out).eval()
    assert exported.get_output_embeddings().weight is not exported.get_input_embeddings().weight
    sampler = sdk.create_sampling_client(model_path=path).result(timeout=60)
    for ids in SENTENCES:
        scored = sampler.compute_logprobs(types.ModelInput.from_ints(ids)).result(timeout=60)
        expected = plain_logprobs(exported, ids[:1], ids[1:])
        np.testing.assert_allclose(np.array(scored[1:], dtype=np.float64), expected, atol=1e-4)
    # the base alone scores them otherwise: the adapter is in the export
    base, _ = load_model(BASE, torch.device("cpu"), seed=0)
    assert not np.allclose(plain_logprobs(base, SENTENCES[0][:1], SENTENCES[0][1:]), expected[: len(SENTENCES[0]) - 1], atol=1e-3)  # fmt: skip

    # one line for what cannot be exported
    for argv, words in (
        ([path, "--out", str(tmp_path / "a")], "a tinker:// path needs --state-root DIR"),
        ([str(checkpoint_dir(served, path)), "--out", str(out)], "exists and is not an empty directory"),
        (
            [path, "--state-root", str(served.root), "--step", "3", "--out", str(tmp_path / "b")],
            "--step: a tinker checkpoint",
        ),
        (
            ["tinker://../x/weights/a", "--state-root", str(served.root), "--out", str(tmp_path / "c")],
            "is not a checkpoint path",
        ),
    ):
        result = cli("export", *argv)
        assert result.returncode == 2 and words in result.stderr and result.stderr.count("\n") == 1, (
            result.stderr
        )
