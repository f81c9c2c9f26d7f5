//! Test helpers: loopback fake OpenAI server, temp workspaces, fixed clock and ids. Never shipped in the binary.
