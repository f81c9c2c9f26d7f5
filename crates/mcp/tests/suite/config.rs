//! `[mcp_servers.<name>]`: what is accepted, how errors are placed, the recorded form.

use std::time::Duration;

use troupe_mcp::{DEFAULT_STARTUP_TIMEOUT, DEFAULT_TOOL_TIMEOUT, McpServers, Transport};
use troupe_protocol::ErrorCode;

const FULL: &str = r#"
[mcp_servers.files]
command = "npx"
args = ["-y", "@modelcontextprotocol/server-filesystem", "."]
env = { LOG_LEVEL = "warn" }
enabled_tools = ["read_file"]
startup_timeout_sec = 2.5
tool_timeout_sec = 30

[mcp_servers.git]
command = "/usr/local/bin/mcp-git"

[mcp_servers.docs]
url = "https://mcp.example.com/mcp"
bearer_token_env_var = "DOCS_TOKEN"
"#;

#[test]
fn a_full_file_parses_and_round_trips_through_its_record() {
    let servers = McpServers::from_toml_str(FULL, "mcp.toml").unwrap();
    let listed: Vec<_> = servers.iter().map(|(name, _)| name.to_string()).collect();
    assert_eq!(listed, ["docs", "files", "git"], "in name order");
    let (_, docs) = servers.iter().next().unwrap();
    assert_eq!(
        docs.transport,
        Transport::Http {
            url: "https://mcp.example.com/mcp".to_owned(),
            bearer_token_env_var: Some("DOCS_TOKEN".to_owned())
        }
    );
    let (_, files) = servers.iter().nth(1).unwrap();
    let Transport::Stdio { command, args, env } = &files.transport else {
        panic!("{files:?}")
    };
    assert_eq!(command, "npx");
    assert_eq!(args.len(), 3);
    assert_eq!(env.get("LOG_LEVEL").map(String::as_str), Some("warn"));
    assert_eq!(
        files.enabled_tools.as_deref(),
        Some(&["read_file".to_owned()][..])
    );
    assert_eq!(files.startup_timeout, Duration::from_millis(2500));
    assert_eq!(files.tool_timeout, Duration::from_secs(30));
    let (_, git) = servers.iter().nth(2).unwrap();
    assert!(git.enabled_tools.is_none());
    assert!(
        matches!(&git.transport, Transport::Stdio { args, env, .. } if args.is_empty() && env.is_empty())
    );
    assert_eq!(git.startup_timeout, DEFAULT_STARTUP_TIMEOUT);
    assert_eq!(git.tool_timeout, DEFAULT_TOOL_TIMEOUT);

    let record = servers.to_record();
    assert_eq!(
        record["files"],
        serde_json::json!({
            "command": "npx",
            "args": ["-y", "@modelcontextprotocol/server-filesystem", "."],
            "env": {"LOG_LEVEL": "warn"},
            "enabledTools": ["read_file"],
            "startupTimeoutMs": 2500,
            "toolTimeoutMs": 30000
        })
    );
    assert_eq!(
        record["docs"],
        serde_json::json!({
            "url": "https://mcp.example.com/mcp",
            "bearerTokenEnvVar": "DOCS_TOKEN",
            "startupTimeoutMs": 10000,
            "toolTimeoutMs": 60000
        })
    );
    assert_eq!(McpServers::from_record(&record).unwrap(), servers);
    // An empty file, or one with an empty table, is no server.
    assert!(McpServers::from_toml_str("", "e.toml").unwrap().is_empty());
    assert!(
        McpServers::from_toml_str("[mcp_servers]\n", "e.toml")
            .unwrap()
            .is_empty()
    );
}

/// Each bad input: the error is `MCP_CONFIG_INVALID`, one line, `origin:line:column: …`,
/// pointing at the offending line.
#[test]
fn every_error_names_the_file_line_and_column() {
    let cases: &[(&str, usize, &str)] = &[
        (
            "[mcp_servers.a]\ncommand = \"x\"\nfoo = 1\n",
            3,
            "unknown field `foo`",
        ),
        ("[mcp_servers.a]\nargs = []\n", 1, "missing `command`"),
        (
            "[mcp_servers.a]\ncommand = \"x\"\nurl = \"http://h\"\n",
            1,
            "not both",
        ),
        (
            "[mcp_servers.a]\nurl = \"ftp://h\"\n",
            1,
            "`url` must be an http://",
        ),
        (
            "[mcp_servers.a]\nurl = \"http://\"\n",
            1,
            "`url` must be an http://",
        ),
        (
            "[mcp_servers.a]\nurl = \"http://h\"\nargs = [\"x\"]\n",
            1,
            "apply to a `command` server only",
        ),
        (
            "[mcp_servers.a]\ncommand = \"x\"\nbearer_token_env_var = \"T\"\n",
            1,
            "applies to a `url` server only",
        ),
        ("[mcp_servers.a]\ncommand = 3\n", 2, "invalid type"),
        (
            "[mcp_servers.a]\ncommand = \"x\"\nstartup_timeout_sec = \"soon\"\n",
            3,
            "invalid type: string \"soon\", expected a number",
        ),
        (
            "[mcp_servers.\"a b\"]\ncommand = \"x\"\n",
            1,
            "letters, digits",
        ),
        ("[mcp_servers.a__b]\ncommand = \"x\"\n", 1, "`__`"),
        (
            "[mcp_servers.a]\ncommand = \" \"\n",
            1,
            "`command` must name",
        ),
        (
            "[mcp_servers.a]\ncommand = \"x\"\ntool_timeout_sec = 0\n",
            1,
            "tool_timeout_sec must be",
        ),
        (
            "[mcp_servers.a]\ncommand = \"x\"\nenv = { \"A=B\" = \"1\" }\n",
            1,
            "invalid variable name",
        ),
        (
            "[mcp_server.a]\ncommand = \"x\"\n",
            1,
            "unknown field `mcp_server`",
        ),
        (
            "[mcp_servers.a]\ncommand = \"x\n",
            2,
            "invalid basic string",
        ),
        (
            "\n\n[mcp_servers.a]\ncommand = \"x\"\nheaders = 1\n",
            5,
            "unknown field `headers`",
        ),
    ];
    for (text, line, wanted) in cases {
        let error = McpServers::from_toml_str(text, "/etc/mcp.toml").unwrap_err();
        assert_eq!(error.code(), "MCP_CONFIG_INVALID", "{text}");
        let shown = error.to_string();
        assert!(!shown.contains('\n'), "one line: {shown}");
        assert!(
            shown.starts_with(&format!("/etc/mcp.toml:{line}:")),
            "{text:?} → {shown}"
        );
        assert!(shown.contains(wanted), "{text:?} → {shown}");
    }
}

#[test]
fn unreadable_large_and_non_utf8_files_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let missing = McpServers::load(&dir.path().join("none.toml")).unwrap_err();
    assert_eq!(missing.code(), "MCP_CONFIG_UNREADABLE");
    assert!(missing.to_string().contains("none.toml"), "{missing}");
    let directory = McpServers::load(dir.path()).unwrap_err();
    assert_eq!(directory.code(), "MCP_CONFIG_UNREADABLE");
    let big = dir.path().join("big.toml");
    std::fs::write(&big, "#".repeat(2 << 20)).unwrap();
    assert_eq!(
        McpServers::load(&big).unwrap_err().code(),
        "MCP_CONFIG_UNREADABLE"
    );
    let latin1 = dir.path().join("latin1.toml");
    std::fs::write(&latin1, b"# ok\n# caf\xe9\n").unwrap();
    let error = McpServers::load(&latin1).unwrap_err();
    assert_eq!(error.code(), "MCP_CONFIG_INVALID");
    assert!(error.to_string().contains("latin1.toml:2:6"), "{error}");
    let good = dir.path().join("good.toml");
    std::fs::write(&good, FULL).unwrap();
    assert_eq!(McpServers::load(&good).unwrap().len(), 3);
}

#[test]
fn a_damaged_record_is_refused() {
    for record in [
        serde_json::json!([]),
        serde_json::json!({"a": {"command": "x"}}),
        serde_json::json!({"a": {"startupTimeoutMs": 1, "toolTimeoutMs": 1}}),
        serde_json::json!({"a b": {"command": "x", "startupTimeoutMs": 1, "toolTimeoutMs": 1}}),
    ] {
        let error = McpServers::from_record(&record).unwrap_err();
        assert_eq!(error.code(), "MCP_CONFIG_INVALID", "{record}");
    }
}
