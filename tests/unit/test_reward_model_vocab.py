"""A reward model with its own tokenizer scores the policy's responses re-tokenised the way
`turnrl rm` trained it: rendered prompt with generation prompt, response, EOS."""

import torch

from turnrl.batch import Batch
from turnrl.config.schema import RewardModelConfig
from turnrl.models.loader import load_tokenizer, tiny_random_config
from turnrl.workers.reward_model import RewardModel


def test_another_vocabulary_is_rescored_as_rm_training_saw_it(tmp_path):
    from transformers import AutoModelForSequenceClassification

    policy_tok = load_tokenizer("tiny-random")
    rm_tok = load_tokenizer("tiny-random")
    rm_tok.add_tokens(["<rm-only>"])  # a vocabulary the policy does not share
    config = tiny_random_config(len(rm_tok), rm_tok)
    config.num_labels = 1
    AutoModelForSequenceClassification.from_config(config).save_pretrained(tmp_path)
    rm_tok.save_pretrained(tmp_path)

    cfg = RewardModelConfig(enable=True)
    cfg.model.path = str(tmp_path)
    rm = RewardModel(cfg, policy_tok)
    assert not rm.same_vocab

    prompt = [{"role": "user", "content": "What is 2 + 3?"}]
    response = policy_tok("The answer is 5.", add_special_tokens=False)["input_ids"]
    width = len(response) + 3
    responses = torch.full((1, width), policy_tok.pad_token_id)
    responses[0, : len(response)] = torch.tensor(response)
    mask = torch.zeros(1, width, dtype=torch.long)
    mask[0, : len(response)] = 1
    batch = Batch(
        tensors={"responses": responses, "response_mask": mask},
        non_tensors={"raw_prompt": [prompt]},
    )
    ids, attention, _ = rm._inputs(batch)
    rendered = rm_tok.apply_chat_template(prompt, tokenize=False, add_generation_prompt=True)
    want = rm_tok(rendered + "The answer is 5.", add_special_tokens=False)["input_ids"] + [
        rm_tok.eos_token_id
    ]
    assert ids[0][attention[0].bool()].tolist() == want
    assert rm.score(batch)["rm_scores"].shape == (1,)
