//! OpenAI-compatible chat-completions client (streaming, tool calls, retries) and the scripted provider.
