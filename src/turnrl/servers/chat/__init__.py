"""The OpenAI chat format over token ids, shared by `turnrl serve`'s `/v1/chat/completions` and the
agent gateway: rendering messages and tools with the model's own chat template (`template`), and
reading tool calls back out of what the model wrote (`tool_calls`); the chat request's fields and
checks (`schema`) and the `chat.completion` answer built from sampled ids (`response`)."""
