"""Search retrieval for agent RL: index a corpus, serve Search-R1's `POST /retrieve`, query it.

Modules (imported on demand, so that importing the client never loads FastAPI or torch):
`corpus` (file formats), `index` (build/load), `bm25` / `dense` (searchers), `server`
(HTTP app), `client` (async client, passage formatting), `launcher` (child-process server),
`cli` (`turnrl retriever ...`). The search task's corpus of invented facts is `turnrl.tasks.search`'s.
"""
