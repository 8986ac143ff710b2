"""Learning from live traffic: the policy served to real clients, their sessions recorded with exact
token ids, rewards that arrive later, training while serving (docs/live.md).

    keys.py      who may call: clients and their keys
    store.py     the sessions, their rewards and what was trained, on disk and replayed on restart
    groups.py    rewarded sessions into groups (pure)
    rows.py      groups into the trainer's batch
    app.py       the HTTP routes
    trainer.py   the trainer whose rollouts are the clients' sessions
    cli.py       `turnrl live serve` and `turnrl live rollback`
"""
