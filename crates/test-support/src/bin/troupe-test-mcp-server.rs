//! The test MCP server on stdio: see `troupe_test_support::mcp_server`. Never shipped.

#[tokio::main(flavor = "current_thread")]
async fn main() {
    troupe_test_support::mcp_server::serve_stdio().await;
}
