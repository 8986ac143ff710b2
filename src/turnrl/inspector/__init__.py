"""The step inspector, `turnrl trace`: one real training step, every stage shown with its tensors.

`trace` runs the step with a recorder and adds the inspector's own stages; `view` turns recorded
batches into plain views; `page` and `markdown` render them; `docs` holds the per-stage texts,
keyed by the trainer's stage names; `cli` registers the command. The inspector imports the
trainer; nothing in the trainer or in `turnrl.tracking` imports the inspector.
"""
