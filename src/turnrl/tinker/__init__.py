"""`turnrl tinker serve`: a Tinker-compatible training service on a local model (docs/tinker.md).

A script written against Thinking Machines' `tinker` SDK points its `ServiceClient(base_url=...)`
here and trains LoRA adapters on the served base model: `forward_backward` with the SDK's built-in
losses, `optim_step`, sampling from the adapted model, `save_state` / `load_state` under a local
state root. The SDK's generated protobuf module reads and writes the binary bodies, so the feature
is the optional extra `turnrl[tinker]`.

    options       the command's settings            cli       the command
    app           the FastAPI app and its ROUTERS   routes_*  one module per SDK client
    service       the worker thread, futures, registry, backbone
    backbone      the base model and its adapters   registry  sessions, clients, samplers by id
    training      forward/backward, optim_step      losses    the built-in losses
    sampling      sample and prompt log-probs       states    adapter/optimizer state, checkpoints
    checkpoints   the state root and tinker:// paths
    export        a checkpoint merged into its base (`turnrl export`)
    futures       results until the SDK reads them
    protobuf      the SDK's protobuf bodies         wire      its JSON bodies
"""
